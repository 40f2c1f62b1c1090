package audit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
	"pgregory.net/rapid"

	"tally/audit"
)

// maxTree bounds the trees the property tests draw: every shape of proof
// up to nine levels, and each check stays fast.
const maxTree = 300

// propertyTree is one tree of maxTree test leaves the property tests
// share: a tree's prefixes are the trees of every smaller size.
var propertyTree = mustTree("p", maxTree)

// hashMutations returns every mutation of a list of hashes a verifier must
// refuse: each byte of each hash flipped (by a drawn non-zero mask), each
// hash dropped, a hash added at each place (a drawn one, or a copy of a
// neighbour), each adjacent pair swapped where the two differ.
func hashMutations(t *rapid.T, hs []tlog.Hash) map[string][]tlog.Hash {
	out := map[string][]tlog.Hash{}
	for i := range hs {
		for j := range tlog.HashSize {
			m := slices.Clone(hs)
			m[i][j] ^= rapid.Byte().Filter(func(b byte) bool { return b != 0 }).Draw(t, "mask")
			out["flip "+itoa(i)+"."+itoa(j)] = m
		}
		out["drop "+itoa(i)] = slices.Delete(slices.Clone(hs), i, i+1)
		if i+1 < len(hs) && hs[i] != hs[i+1] {
			m := slices.Clone(hs)
			m[i], m[i+1] = m[i+1], m[i]
			out["swap "+itoa(i)] = m
		}
	}
	for i := 0; i <= len(hs); i++ {
		var extra tlog.Hash
		copy(extra[:], rapid.SliceOfN(rapid.Byte(), tlog.HashSize, tlog.HashSize).Draw(t, "extra"))
		out["add "+itoa(i)] = slices.Insert(slices.Clone(hs), i, extra)
		if len(hs) > 0 {
			out["repeat "+itoa(i)] = slices.Insert(slices.Clone(hs), i, hs[min(i, len(hs)-1)])
		}
	}
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

func root(t *rapid.T, size int64) tlog.Hash {
	h, err := propertyTree.Root(size)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Inclusion: the proof of a drawn leaf in a drawn tree verifies, and every
// mutation of it, of the leaf, of its index or of the tree it is checked
// against (another size with that size's root) is refused.
func TestInclusionRefusesMutations(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.Int64Range(1, maxTree).Draw(t, "size")
		index := rapid.Int64Range(0, size-1).Draw(t, "index")
		proof, err := propertyTree.InclusionProof(index, size)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := propertyTree.LeafHash(index)
		r := root(t, size)
		if err := audit.CheckInclusion("p", index, leaf, size, r, proof); err != nil {
			t.Fatalf("valid proof refused: %v", err)
		}
		refuse := func(what string, err error) {
			if err == nil {
				t.Fatalf("%s: accepted", what)
			}
			if !errors.Is(err, audit.ErrProof) {
				t.Fatalf("%s: error %v is not ErrProof", what, err)
			}
		}
		for name, m := range hashMutations(t, proof) {
			refuse("proof "+name, audit.CheckInclusion("p", index, leaf, size, r, m))
		}
		for name, m := range hashMutations(t, []tlog.Hash{leaf, r}) {
			if len(m) == 2 {
				refuse("leaf or root "+name, audit.CheckInclusion("p", index, m[0], size, m[1], proof))
			}
		}
		for other := int64(-1); other <= size; other++ {
			if other != index {
				refuse("index "+itoa(int(other)), audit.CheckInclusion("p", other, leaf, size, r, proof))
			}
		}
		// An index outside the tree is refused for that, before the proof
		// is looked at.
		for _, other := range []int64{-1, size} {
			err := audit.CheckInclusion("p", other, leaf, size, r, proof)
			if want := "leaf index " + itoa(int(other)) + " is not in a tree of size " + itoa(int(size)); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("index %d of a tree of size %d: error %v, want one saying %q", other, size, err, want)
			}
		}
		for other := int64(0); other <= maxTree; other++ {
			if other != size {
				var otherRoot tlog.Hash
				if other > 0 {
					otherRoot = root(t, other)
				}
				refuse("size "+itoa(int(other)), audit.CheckInclusion("p", index, leaf, other, otherRoot, proof))
			}
		}
	})
}

// Consistency: the proof between two drawn sizes verifies, and every
// mutation of it, of either root, or of either size (with that size's
// root) is refused.
func TestConsistencyRefusesMutations(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		newSize := rapid.Int64Range(1, maxTree).Draw(t, "new")
		oldSize := rapid.Int64Range(1, newSize).Draw(t, "old")
		proof, err := propertyTree.ConsistencyProof(oldSize, newSize)
		if err != nil {
			t.Fatal(err)
		}
		oldRoot, newRoot := root(t, oldSize), root(t, newSize)
		if err := audit.CheckConsistency("p", oldSize, oldRoot, newSize, newRoot, proof); err != nil {
			t.Fatalf("valid proof refused: %v", err)
		}
		refuse := func(what string, err error) {
			if !errors.Is(err, audit.ErrProof) {
				t.Fatalf("%s: error %v, want ErrProof", what, err)
			}
		}
		for name, m := range hashMutations(t, proof) {
			refuse("proof "+name, audit.CheckConsistency("p", oldSize, oldRoot, newSize, newRoot, m))
		}
		for name, m := range hashMutations(t, []tlog.Hash{oldRoot, newRoot}) {
			if len(m) == 2 {
				refuse("roots "+name, audit.CheckConsistency("p", oldSize, m[0], newSize, m[1], proof))
			}
		}
		for other := int64(1); other <= maxTree; other++ {
			if other != oldSize && other <= newSize {
				refuse("old size "+itoa(int(other)), audit.CheckConsistency("p", other, root(t, other), newSize, newRoot, proof))
			}
			if other != newSize && other >= oldSize {
				refuse("new size "+itoa(int(other)), audit.CheckConsistency("p", oldSize, oldRoot, other, root(t, other), proof))
			}
		}
	})
}

// Consistency from the empty tree, the boundary the property test above
// leaves out: the proof the tree gives (empty) verifies against any newer
// tree; a proof of one or more hashes (drawn, or hashes of the tree) is
// refused, as is an older size below 0.
func TestConsistencyFromEmptyTree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		newSize := rapid.Int64Range(0, maxTree).Draw(t, "new")
		var newRoot tlog.Hash
		if newSize > 0 {
			newRoot = root(t, newSize)
		}
		proof, err := propertyTree.ConsistencyProof(0, newSize)
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.CheckConsistency("p", 0, tlog.Hash{}, newSize, newRoot, proof); err != nil {
			t.Fatalf("the empty tree's proof against size %d refused: %v", newSize, err)
		}
		n := rapid.IntRange(1, 12).Draw(t, "hashes")
		extra := make(tlog.TreeProof, n)
		for i := range extra {
			if newSize > 0 && rapid.Bool().Draw(t, "tree hash") {
				extra[i], _ = propertyTree.LeafHash(rapid.Int64Range(0, newSize-1).Draw(t, "leaf"))
			} else {
				copy(extra[i][:], rapid.SliceOfN(rapid.Byte(), tlog.HashSize, tlog.HashSize).Draw(t, "extra"))
			}
		}
		err = audit.CheckConsistency("p", 0, tlog.Hash{}, newSize, newRoot, extra)
		if !errors.Is(err, audit.ErrProof) || !strings.Contains(err.Error(), "from the empty tree must be empty") {
			t.Fatalf("a proof of %d hashes from size 0 to %d: error %v, want ErrProof saying it must be empty", n, newSize, err)
		}
		err = audit.CheckConsistency("p", -1, tlog.Hash{}, newSize, newRoot, proof)
		if !errors.Is(err, audit.ErrProof) {
			t.Fatalf("from size -1 to %d: error %v, want ErrProof", newSize, err)
		}
	})
}

// receiptFixture is a valid receipt of leaf index in a tree of size,
// against a checkpoint signed with the test key.
func receiptFixture(t failer, k keys, size, index int64) audit.Receipt {
	proof, err := propertyTree.InclusionProof(index, size)
	if err != nil {
		t.Fatal(err)
	}
	r, err := propertyTree.Root(size)
	if err != nil {
		t.Fatal(err)
	}
	cp := sign(t, k.signer, audit.Origin(testLogName, "p"), size, r)
	rc, err := audit.NewReceipt(testLeaf("p", int(index)), index, size, cp, proof)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// receiptMutations are the changes to a receipt that VerifyReceipt must
// refuse, but for the proof's and the checkpoint's bytes, which the test
// mutates one by one.
func receiptMutations(t *rapid.T, k keys, r audit.Receipt) map[string]audit.Receipt {
	other := func(s string) string { return s + "x" }
	size, index := r.TreeSize, r.LeafIndex
	root := root(t, size)
	ms := map[string]func(*audit.Receipt){
		"poll_id":       func(m *audit.Receipt) { m.PollID = other(m.PollID) },
		"candidate_id":  func(m *audit.Receipt) { m.CandidateID = other(m.CandidateID) },
		"principal_id":  func(m *audit.Receipt) { m.PrincipalID = other(m.PrincipalID) },
		"event_id":      func(m *audit.Receipt) { m.EventID = other(m.EventID) },
		"received_at":   func(m *audit.Receipt) { m.ReceivedAt = m.ReceivedAt.Add(time.Microsecond) },
		"leaf_index +1": func(m *audit.Receipt) { m.LeafIndex++ },
		"leaf_index -1": func(m *audit.Receipt) { m.LeafIndex-- },
		"leaf_hash":     func(m *audit.Receipt) { m.LeafHash[rapid.IntRange(0, 31).Draw(t, "byte")] ^= 1 },
		"tree_size +1":  func(m *audit.Receipt) { m.TreeSize++ },
		"tree_size -1":  func(m *audit.Receipt) { m.TreeSize-- },
		"forged key": func(m *audit.Receipt) {
			m.Checkpoint = string(sign(t, k.forger, audit.Origin(testLogName, "p"), size, root))
		},
		"other poll": func(m *audit.Receipt) {
			m.Checkpoint = string(sign(t, k.signer, audit.Origin(testLogName, "q"), size, root))
		},
		"other log": func(m *audit.Receipt) {
			m.Checkpoint = string(sign(t, k.rotated, audit.Origin("tally.example.org-2027", "p"), size, root))
		},
		"signed size +1": func(m *audit.Receipt) {
			m.Checkpoint = string(sign(t, k.signer, audit.Origin(testLogName, "p"), size+1, root))
		},
		"next tree":       func(m *audit.Receipt) { m.TreeSize, m.Checkpoint = resigned(t, k, size+1) },
		"previous tree":   func(m *audit.Receipt) { m.TreeSize, m.Checkpoint = resigned(t, k, size-1) },
		"other leaf hash": func(m *audit.Receipt) { m.LeafHash, _ = propertyTree.LeafHash((index + 1) % maxTree) },
	}
	out := map[string]audit.Receipt{}
	for name, f := range ms {
		m := r
		m.InclusionProof = slices.Clone(r.InclusionProof)
		f(&m)
		out[name] = m
	}
	return out
}

// resigned is a valid checkpoint of the tree at size (0 when size is out
// of the tree's range, so the mutation stays a refusal to test).
func resigned(t *rapid.T, k keys, size int64) (int64, string) {
	if size < 0 || size > maxTree {
		size = 0
	}
	return size, string(sign(t, k.signer, audit.Origin(testLogName, "p"), size, root(t, size)))
}

// Receipts: a valid receipt verifies, in memory and through its JSON;
// each field changed, proofs with a hash dropped, added, repeated, swapped
// or flipped, and checkpoints by another key, of another poll or of
// another size are refused. (Each byte of each proof hash is flipped in
// TestInclusionRefusesMutations, each byte of the checkpoint in
// TestReceiptRefusesCheckpointBytes: here they would cost a signature
// check each.)
func TestReceiptRefusesMutations(t *testing.T) {
	k := testKeys(t)
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.Int64Range(1, maxTree).Draw(t, "size")
		index := rapid.Int64Range(0, size-1).Draw(t, "index")
		r := receiptFixture(t, k, size, index)
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := audit.ParseReceipt(b)
		if err != nil {
			t.Fatalf("receipt does not parse back: %v\n%s", err, b)
		}
		if _, err := audit.VerifyReceipt(back, k.verifier, testLogName); err != nil {
			t.Fatalf("valid receipt refused: %v", err)
		}
		refuse := func(what string, m audit.Receipt) {
			if _, err := audit.VerifyReceipt(m, k.verifier, testLogName); err == nil {
				t.Fatalf("%s: accepted", what)
			}
		}
		if len(r.InclusionProof) > 0 {
			m := r
			m.InclusionProof = nil
			refuse("no proof", m)
		}
		for name, m := range receiptMutations(t, k, r) {
			refuse(name, m)
		}
		at := rapid.IntRange(0, tlog.HashSize-1).Draw(t, "proof byte")
		for name, p := range hashMutations(t, r.InclusionProof) {
			if !strings.HasPrefix(name, "flip ") || strings.HasSuffix(name, "."+itoa(at)) {
				m := r
				m.InclusionProof = p
				refuse("proof "+name, m)
			}
		}
	})
}

// Every byte of a receipt's checkpoint changed (four masks each) makes the
// receipt refused, for a leaf of a one-leaf tree and of a larger one.
func TestReceiptRefusesCheckpointBytes(t *testing.T) {
	k := testKeys(t)
	for _, tc := range []struct{ size, index int64 }{{1, 0}, {maxTree, 137}} {
		r := receiptFixture(t, k, tc.size, tc.index)
		if _, err := audit.VerifyReceipt(r, k.verifier, testLogName); err != nil {
			t.Fatalf("valid receipt refused: %v", err)
		}
		for i := range len(r.Checkpoint) {
			for _, mask := range []byte{0x01, 0x20, 0x80, 0xff} {
				m := r
				cp := []byte(r.Checkpoint)
				cp[i] ^= mask
				m.Checkpoint = string(cp)
				if _, err := audit.VerifyReceipt(m, k.verifier, testLogName); err == nil {
					t.Fatalf("size %d: checkpoint byte %d ^ %#x accepted:\n%s", tc.size, i, mask, cp)
				}
			}
		}
	}
}

// ParseConsistencyProof reads what the consistency endpoint answers and
// refuses sizes that cannot be a proof's: from below 0, or past to.
func TestParseConsistencyProof(t *testing.T) {
	const roots = `,"from_root":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","to_root":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="`
	for _, in := range []string{
		`{"poll_id":"p","from":0,"to":0,"proof":[]` + roots + `}`,
		`{"poll_id":"p","from":1,"to":2,"proof":["` + tlog.Hash{1}.String() + `"]` + roots + `}`,
	} {
		if _, err := audit.ParseConsistencyProof([]byte(in)); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
	p, err := audit.ParseConsistencyProof([]byte(`{"poll_id":"p","from":1,"to":2,"proof":["` + tlog.Hash{1}.String() + `"]` + roots + `}`))
	if err != nil || p.PollID != "p" || p.From != 1 || p.To != 2 || len(p.Proof) != 1 || p.Proof[0] != (tlog.Hash{1}) {
		t.Errorf("read back %+v, %v", p, err)
	}
	for _, tc := range []struct{ in, says string }{
		{`{"poll_id":"p","from":-1,"to":2,"proof":[]` + roots + `}`, "from -1 to 2"},
		{`{"poll_id":"p","from":3,"to":2,"proof":[]` + roots + `}`, "from 3 to 2"},
		{`{"poll_id":"p","from":1,"to":-1,"proof":[]` + roots + `}`, "from 1 to -1"},
		{`{"poll_id":"p","from":"1","to":2,"proof":[]` + roots + `}`, "consistency proof"},
		{`{"poll_id":"p","from":1,"to":2,"proof":["AA"]` + roots + `}`, "consistency proof"},
		{`{"poll_id":"p","from":1,"to":2,"proof":[]}`, "from_root is missing"},
		{`{"poll_id":"p","from":1,"to":2,"proof":[],"from_root":null` + roots[len(`,"from_root":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="`):] + `}`, "from_root is null"},
		{`{"Poll_ID":"p","from":1,"to":2,"proof":[]` + roots + `}`, `key "poll_id" is spelt "Poll_ID"`},
		{`{"poll_id":"p","poll_id":"q","from":1,"to":2,"proof":[]` + roots + `}`, `key "poll_id" is given twice`},
		{`{"poll_id":"p","from":1,"to":2,"proof":[],"note":1` + roots + `}`, `unknown key "note"`},
		{`{"poll_id":"p","from":1,"to":2,"proof":[]` + roots + `} {}`, "data follows"},
	} {
		if _, err := audit.ParseConsistencyProof([]byte(tc.in)); !errors.Is(err, audit.ErrMalformed) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %v, want ErrMalformed saying %q", tc.in, err, tc.says)
		}
	}
}

func TestParseReceiptRefusals(t *testing.T) {
	k := testKeys(t)
	good, err := json.Marshal(receiptFixture(t, k, 5, 2))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(good, []byte(`"received_at":"2026-03-01T12:00:00.002000Z"`)) {
		t.Errorf("received_at not written with microseconds: %s", good)
	}
	for _, tc := range []struct{ name, in, says string }{
		{"unknown field", strings.Replace(string(good), `"poll_id"`, `"poll":"x","poll_id"`, 1), "unknown field"},
		{"short hash", strings.Replace(string(good), `"leaf_hash":"`, `"leaf_hash":"AA`, 1), "hash"},
		{"trailing", string(good) + "{}", "follows"},
		{"no time", strings.Replace(string(good), `,"received_at":"2026-03-01T12:00:00.002000Z"`, ``, 1), "received_at"},
		{"no checkpoint", `{"poll_id":"p","received_at":"2026-03-01T12:00:00Z"}`, "checkpoint"},
		{"not json", "receipt", "malformed receipt"},
		{"a key in another case beside it", strings.Replace(string(good), `"poll_id"`, `"Candidate_ID":"salad","poll_id"`, 1), `key "candidate_id" is spelt "Candidate_ID"`},
		{"a key twice", strings.Replace(string(good), `"poll_id"`, `"candidate_id":"salad","poll_id"`, 1), `key "candidate_id" is given twice`},
		{"a null", regexp.MustCompile(`"leaf_index":\d+`).ReplaceAllString(string(good), `"leaf_index":null`), "leaf_index is null"},
		{"no leaf_hash", regexp.MustCompile(`"leaf_hash":"[^"]*",`).ReplaceAllString(string(good), ``), "leaf_hash is missing"},
		{"no candidate", regexp.MustCompile(`"candidate_id":"[^"]*",`).ReplaceAllString(string(good), ``), "neither candidate_id nor ballot"},
		{"a candidate and a ballot", strings.Replace(string(good), `"poll_id":"p",`, `"poll_id":"p","ballot":["a"],`, 1), "both candidate_id and ballot"},
	} {
		if _, err := audit.ParseReceipt([]byte(tc.in)); !errors.Is(err, audit.ErrMalformed) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %v, want ErrMalformed saying %q", tc.name, err, tc.says)
		}
	}
}

// receiptCheckpoint is the checkpoint a verified receipt of leaf 3 in a
// tree of 10 opens.
func receiptCheckpoint(t *testing.T, k keys) audit.Checkpoint {
	t.Helper()
	older, err := audit.VerifyReceipt(receiptFixture(t, k, 10, 3), k.verifier, testLogName)
	if err != nil {
		t.Fatal(err)
	}
	return older
}

// A later checkpoint still holds a receipt's leaf: VerifyConsistency with
// the tree's proof, refused for a checkpoint of another poll.
func TestVerifyConsistency(t *testing.T) {
	k := testKeys(t)
	older := receiptCheckpoint(t, k)
	// The later checkpoint is signed after a key rotation: same poll.
	newRoot, _ := propertyTree.Root(40)
	newer, err := audit.OpenCheckpoint(sign(t, k.rotated, audit.Origin("tally.example.org-2027", "p"), 40, newRoot), k.rotatedV, audit.Origin("tally.example.org-2027", "p"))
	if err != nil {
		t.Fatal(err)
	}
	proof, _ := propertyTree.ConsistencyProof(10, 40)
	if err := audit.VerifyConsistency(older, newer, proof); err != nil {
		t.Fatalf("consistent checkpoints refused: %v", err)
	}
	if err := audit.VerifyConsistency(newer, older, proof); !errors.Is(err, audit.ErrProof) {
		t.Errorf("older and newer swapped: %v", err)
	}
	other := newer
	other.Origin = audit.Origin(testLogName, "q")
	if err := audit.VerifyConsistency(older, other, proof); !errors.Is(err, audit.ErrOrigin) {
		t.Errorf("checkpoint of another poll: %v", err)
	}
}

// A ConsistencyProof verifies only for the poll and sizes it names: a proof
// of another poll is refused even between equal sizes, where every proof
// is empty, and even when its hashes are those of the right poll.
func TestConsistencyProofVerify(t *testing.T) {
	k := testKeys(t)
	older := receiptCheckpoint(t, k)
	newRoot, _ := propertyTree.Root(40)
	newer, err := audit.OpenCheckpoint(sign(t, k.signer, audit.Origin(testLogName, "p"), 40, newRoot), k.verifier, audit.Origin(testLogName, "p"))
	if err != nil {
		t.Fatal(err)
	}
	hashes, _ := propertyTree.ConsistencyProof(10, 40)
	good := audit.ConsistencyProof{PollID: "p", From: 10, To: 40, Proof: hashes, FromRoot: older.Root, ToRoot: newer.Root}
	if err := good.Verify(older, newer); err != nil {
		t.Fatalf("the proof of the poll: %v", err)
	}
	if err := (audit.ConsistencyProof{PollID: "p", From: 10, To: 10, FromRoot: older.Root, ToRoot: older.Root}).Verify(older, older); err != nil {
		t.Fatalf("equal sizes: %v", err)
	}
	fromRoot, toRoot := good, good
	fromRoot.FromRoot[0] ^= 1
	toRoot.ToRoot[31] ^= 1
	relabelled := good
	relabelled.PollID = "q"
	for _, tc := range []struct {
		name  string
		proof audit.ConsistencyProof
		newer audit.Checkpoint
		want  error
		says  string
	}{
		{"another poll, equal sizes", audit.ConsistencyProof{PollID: "q", From: 10, To: 10}, older, audit.ErrOrigin, `poll "q", but the checkpoint it starts from is of poll "p": use the consistency proof of poll p`},
		{"another poll", relabelled, newer, audit.ErrOrigin, `poll "q"`},
		{"a poll whose id the other's is a prefix of", audit.ConsistencyProof{PollID: "p2", From: 10, To: 10}, older, audit.ErrOrigin, `poll "p2"`},
		{"no poll", audit.ConsistencyProof{From: 10, To: 10}, older, audit.ErrOrigin, `poll ""`},
		{"from another size", audit.ConsistencyProof{PollID: "p", From: 9, To: 40, Proof: hashes}, newer, audit.ErrProof, "from size 9 to 40"},
		{"to another size", audit.ConsistencyProof{PollID: "p", From: 10, To: 39, Proof: hashes}, newer, audit.ErrProof, "from size 10 to 39"},
		{"a changed hash", audit.ConsistencyProof{PollID: "p", From: 10, To: 40, Proof: append(tlog.TreeProof{{1}}, hashes[1:]...),
			FromRoot: older.Root, ToRoot: newer.Root}, newer, audit.ErrProof, "does not show"},
		{"another from_root", fromRoot, newer, audit.ErrProof, "the proof is of other trees than the checkpoints'"},
		{"another to_root", toRoot, newer, audit.ErrProof, "the proof is of other trees than the checkpoints'"},
	} {
		if err := tc.proof.Verify(older, tc.newer); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.want, tc.says)
		}
	}
}
