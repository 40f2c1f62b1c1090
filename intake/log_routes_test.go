package intake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"tally/audit"
	"tally/internal/testenv"
	"tally/ledger"
)

// This file tests what intake serves of a poll's Merkle log: the receipt
// of a recorded vote, the signed checkpoint, consistency proofs, and the
// tree size of results; each is checked the way an auditor would, with
// package audit.

const testLogName = "tally.test"

// logKeys signs checkpoints of the bundle's polls as the projector would.
type logKeys struct {
	signer note.Signer
	sign   func(t *testing.T, poll string) string // signs and stores the poll's head; returns the note
	verify func(t *testing.T, note string, poll string) audit.Checkpoint
}

func newLogKeys(t *testing.T, b *bundle) (logKeys, string) {
	t.Helper()
	skey, vkey, err := audit.GenerateKey(testLogName)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := audit.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return logKeys{
		signer: signer,
		sign: func(t *testing.T, poll string) string {
			t.Helper()
			ctx := context.Background()
			h, err := b.store.Head(ctx, poll)
			if err != nil {
				t.Fatal(err)
			}
			note, err := audit.SignCheckpoint(signer, audit.Origin(testLogName, poll), h.Size, h.Root)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.store.AddCheckpoint(ctx, poll, h.Size, h.Root, string(note)); err != nil {
				t.Fatal(err)
			}
			return string(note)
		},
		verify: func(t *testing.T, note string, poll string) audit.Checkpoint {
			t.Helper()
			cp, err := audit.OpenCheckpoint([]byte(note), verifier, audit.Origin(testLogName, poll))
			if err != nil {
				t.Fatal(err)
			}
			return cp
		},
	}, vkey
}

// logSize is the size of poll's log. Read before any vote, it is where
// the votes' leaves start: leaf 0 of a poll's log is its definition
// (CreatePoll logs it, audit.Definition), so a new poll's log holds one
// leaf, the n-th vote (from 0) is leaf logSize+n, and the tree of k votes
// has logSize+k leaves.
func logSize(t testing.TB, b *bundle, poll string) int64 {
	t.Helper()
	h, err := b.store.Head(context.Background(), poll)
	if err != nil {
		t.Fatal(err)
	}
	return h.Size
}

// appendVotes records a vote of a new principal on p1 for each id.
func appendVotes(t *testing.T, b *bundle, ids ...string) {
	t.Helper()
	var events []ledger.Event
	for _, id := range ids {
		p, _ := b.principal(t, "voter-"+id)
		events = append(events, ledger.Event{PrincipalID: p.ID, ClientEventID: id, PollID: "p1", CandidateID: "b",
			ReceivedAt: time.Now()})
	}
	if _, err := b.store.Append(context.Background(), events); err != nil {
		t.Fatal(err)
	}
}

func TestReceiptVerifiesOffline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	keys, vkey := newLogKeys(t, b)
	base := logSize(t, b, "p1") // the definition's leaf; the votes follow
	appendVotes(t, b, "x1", "x2")
	if _, err := b.store.Append(ctx, []ledger.Event{
		{PrincipalID: b.who.ID, ClientEventID: "mine", PollID: "p1", CandidateID: "a", ReceivedAt: time.Now()},
	}); err != nil {
		t.Fatal(err)
	}

	// Recorded, but no checkpoint covers it yet: no receipt, and no
	// checkpoint to fetch.
	st := b.do(t, http.MethodGet, "/v1/votes/mine", b.token, "", nil)
	if st.code != http.StatusOK || st.str("status") != "recorded" || st.body["receipt"] != nil {
		t.Fatalf("before any checkpoint: %d %s", st.code, st.raw)
	}
	wantProblemType(t, b.do(t, http.MethodGet, "/v1/polls/p1/checkpoint", b.token, "", nil), http.StatusNotFound, "no-checkpoint")

	first := keys.sign(t, "p1")
	cpr := b.do(t, http.MethodGet, "/v1/polls/p1/checkpoint", b.token, "", nil)
	if cpr.code != http.StatusOK || cpr.raw != first || cpr.header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("checkpoint: %d %q %q, want the note %q", cpr.code, cpr.header.Get("Content-Type"), cpr.raw, first)
	}

	// The receipt, saved as a voter would save it, verifies with the
	// published key alone.
	st = b.do(t, http.MethodGet, "/v1/votes/mine", b.token, "", nil)
	receipt := receiptOf(t, st)
	file := filepath.Join(t.TempDir(), "receipt.json")
	if err := os.WriteFile(file, receipt, 0o600); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := audit.ParseReceipt(saved)
	if err != nil {
		t.Fatalf("the receipt does not parse as tally audit receipt reads it: %v\n%s", err, saved)
	}
	verifier, err := audit.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	older, err := audit.VerifyReceipt(r, verifier, testLogName)
	if err != nil {
		t.Fatalf("VerifyReceipt: %v\n%s", err, saved)
	}
	if r.LeafIndex != base+2 || r.TreeSize != base+3 || r.EventID != "mine" || r.PrincipalID != b.who.ID || r.CandidateID != "a" {
		t.Fatalf("receipt of leaf %d in a tree of %d (%s %s %s), want leaf %d of %d of this voter's vote for a",
			r.LeafIndex, r.TreeSize, r.EventID, r.PrincipalID, r.CandidateID, base+2, base+3)
	}
	changed := r
	changed.CandidateID = "b"
	if _, err := audit.VerifyReceipt(changed, verifier, testLogName); err == nil {
		t.Fatal("a receipt with its candidate changed verifies")
	}

	// A later checkpoint still holds the vote: the consistency proof from
	// the receipt's tree to it verifies, to the current size too.
	appendVotes(t, b, "y1", "y2", "y3")
	newer := keys.verify(t, keys.sign(t, "p1"), "p1")
	if newer.Size != base+6 {
		t.Fatalf("the second checkpoint is of size %d, want %d", newer.Size, base+6)
	}
	for _, q := range []string{fmt.Sprintf("?from=%d&to=%d", base+3, base+6), fmt.Sprintf("?from=%d", base+3)} {
		proof := consistencyOf(t, b, q)
		if proof.From != r.TreeSize || proof.To != newer.Size {
			t.Fatalf("%s: proof from %d to %d, want %d to %d", q, proof.From, proof.To, base+3, base+6)
		}
		if err := audit.VerifyConsistency(older, newer, proof.Proof); err != nil {
			t.Fatalf("%s: VerifyConsistency: %v", q, err)
		}
		if len(proof.Proof) == 0 {
			t.Fatalf("%s: an empty proof between different sizes", q)
		}
		proof.Proof[0][0] ^= 1
		if err := audit.VerifyConsistency(older, newer, proof.Proof); err == nil {
			t.Fatalf("%s: a proof with a flipped bit verifies", q)
		}
	}
	// Equal sizes: an empty proof, [] rather than null.
	if p := consistencyOf(t, b, fmt.Sprintf("?from=%d&to=%d", base+6, base+6)); p.Proof == nil || len(p.Proof) != 0 {
		t.Fatalf("from %d to %d: proof %v, want []", base+6, base+6, p.Proof)
	}

	// The vote's receipt now proves against the newer checkpoint.
	r2, err := audit.ParseReceipt(receiptOf(t, b.do(t, http.MethodGet, "/v1/votes/mine", b.token, "", nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audit.VerifyReceipt(r2, verifier, testLogName); err != nil || r2.LeafIndex != base+2 || r2.TreeSize != base+6 {
		t.Fatalf("the receipt after the second checkpoint: leaf %d, tree size %d, %v; want leaf %d of %d",
			r2.LeafIndex, r2.TreeSize, err, base+2, base+6)
	}
}

// receiptOf is the receipt field of a vote's status answer, as sent.
func receiptOf(t *testing.T, st reply) []byte {
	t.Helper()
	if st.code != http.StatusOK || st.str("status") != "recorded" {
		t.Fatalf("status: %d %s", st.code, st.raw)
	}
	var raw struct {
		Receipt json.RawMessage `json:"receipt"`
	}
	if err := json.Unmarshal([]byte(st.raw), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Receipt) == 0 {
		t.Fatalf("a recorded vote covered by a checkpoint has no receipt: %s", st.raw)
	}
	return raw.Receipt
}

// consistencyOf fetches /v1/polls/p1/consistency with query q and reads
// it as tally audit receipt --consistency does.
func consistencyOf(t *testing.T, b *bundle, q string) audit.ConsistencyProof {
	t.Helper()
	res := b.do(t, http.MethodGet, "/v1/polls/p1/consistency"+q, b.token, "", nil)
	if res.code != http.StatusOK {
		t.Fatalf("consistency %s: %d %s", q, res.code, res.raw)
	}
	p, err := audit.ParseConsistencyProof([]byte(res.raw))
	if err != nil {
		t.Fatalf("consistency %s: %v", q, err)
	}
	if p.PollID != "p1" || res.str("from_root") == "" || res.str("to_root") == "" {
		t.Fatalf("consistency %s: %s", q, res.raw)
	}
	return p
}

// The leaves on either side of a checkpoint's size: the last one it
// covers has a receipt; the first one past it (leaf index = size) and the
// next are recorded, with no receipt yet.
func TestReceiptOnlyUnderTheCheckpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	keys, _ := newLogKeys(t, b)
	base := logSize(t, b, "p1") // the definition's leaf; the votes follow
	appendVotes(t, b, "x1")
	if _, err := b.store.Append(ctx, []ledger.Event{
		{PrincipalID: b.who.ID, ClientEventID: "mine", PollID: "p1", CandidateID: "a", ReceivedAt: time.Now()},
	}); err != nil {
		t.Fatal(err)
	}
	cp := keys.verify(t, keys.sign(t, "p1"), "p1")
	if cp.Size != base+2 {
		t.Fatalf("checkpoint of size %d, want %d", cp.Size, base+2)
	}
	r, err := audit.ParseReceipt(receiptOf(t, b.do(t, http.MethodGet, "/v1/votes/mine", b.token, "", nil)))
	if err != nil || r.LeafIndex != base+1 || r.TreeSize != base+2 {
		t.Fatalf("receipt of the checkpoint's last leaf: %+v, %v; want leaf %d of %d", r, err, base+1, base+2)
	}
	for _, leaf := range []int64{base + 2, base + 3} {
		p, token := b.principal(t, "later")
		if _, err := b.store.Append(ctx, []ledger.Event{
			{PrincipalID: p.ID, ClientEventID: "later", PollID: "p1", CandidateID: "b", ReceivedAt: time.Now()},
		}); err != nil {
			t.Fatal(err)
		}
		st := b.do(t, http.MethodGet, "/v1/votes/later", token, "", nil)
		if st.code != http.StatusOK || st.str("status") != "recorded" || st.body["receipt"] != nil {
			t.Errorf("leaf %d, past the checkpoint of size %d: %d %s, want 200 recorded with no receipt", leaf, cp.Size, st.code, st.raw)
		}
	}
}

// A stored checkpoint whose root is not the log's at its size (the log was
// changed after it was signed, or the row was inserted by hand): no
// receipt is served against it.
func TestNoReceiptAgainstADisagreeingCheckpoint(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	b := setup(t, withDB(db), withRedis(rdb, prefix))
	ctx := context.Background()
	keys, _ := newLogKeys(t, b)
	appendVotes(t, b, "x1", "x2")
	if _, err := b.store.Append(ctx, []ledger.Event{
		{PrincipalID: b.who.ID, ClientEventID: "mine", PollID: "p1", CandidateID: "a", ReceivedAt: time.Now()},
	}); err != nil {
		t.Fatal(err)
	}
	keys.sign(t, "p1")
	receiptOf(t, b.do(t, http.MethodGet, "/v1/votes/mine", b.token, "", nil)) // served while they agree

	appendVotes(t, b, "y1")
	h, err := b.store.Head(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	wrong := h.Root
	wrong[0] ^= 1
	note, err := audit.SignCheckpoint(keys.signer, audit.Origin(testLogName, "p1"), h.Size, wrong)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO poll_log_checkpoints (poll_id, size, root, checkpoint) VALUES ('p1', $1, $2, $3)`,
		h.Size, wrong[:], string(note)); err != nil {
		t.Fatal(err)
	}
	st := b.do(t, http.MethodGet, "/v1/votes/mine", b.token, "", nil)
	if st.body["receipt"] != nil {
		t.Fatalf("a receipt against a checkpoint that disagrees with the log: %d %s", st.code, st.raw)
	}
	wantProblemType(t, st, http.StatusServiceUnavailable, "unavailable")
}

func TestConsistencyRefusesBadSizes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	appendVotes(t, b, "x1", "x2", "x3")
	size := logSize(t, b, "p1") // the definition's leaf and the three votes'
	past := strconv.FormatInt(size+1, 10)
	for _, q := range []string{"", "?to=2", "?from=x", "?from=1.5", "?from=0", "?from=-1", "?from=3&to=2",
		"?from=1&to=" + past, "?from=" + past, "?from=1&from=2", "?from=99999999999999999999"} {
		res := b.do(t, http.MethodGet, "/v1/polls/p1/consistency"+q, b.token, "", nil)
		wantProblemType(t, res, http.StatusBadRequest, "invalid-tree-size")
	}
	if p := consistencyOf(t, b, fmt.Sprintf("?from=1&to=%d", size)); p.From != 1 || p.To != size {
		t.Fatalf("from 1 to %d: %+v", size, p)
	}
	// A bad size to a poll the principal may not see still reads as an
	// unknown poll: the 400 must not tell that it exists.
	wantProblemType(t, b.do(t, http.MethodGet, "/v1/polls/nope/consistency?from=x", b.token, "", nil), http.StatusNotFound, "unknown-poll")
}

func TestLogRoutesHideRestrictedPolls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keys, _ := newLogKeys(t, b)
	insider, insiderToken := b.principal(t, "insider")
	b.poll(t, ledger.Poll{ID: "secret", Title: "Board", Choices: []string{"x", "y"}, Eligible: []string{insider.ID}})
	if _, err := b.store.Append(context.Background(), []ledger.Event{
		{PrincipalID: insider.ID, ClientEventID: "s1", PollID: "secret", CandidateID: "x", ReceivedAt: time.Now()},
	}); err != nil {
		t.Fatal(err)
	}
	keys.sign(t, "secret")
	for _, path := range []string{"/v1/polls/secret/checkpoint", "/v1/polls/secret/consistency?from=1", "/v1/polls/secret/consistency?from=7"} {
		hidden := b.do(t, http.MethodGet, path, b.token, "", nil)
		wantProblemType(t, hidden, http.StatusNotFound, "unknown-poll")
		if ok := b.do(t, http.MethodGet, path, insiderToken, "", nil); ok.code == http.StatusNotFound {
			t.Fatalf("%s to an eligible principal: %s", path, ok.raw)
		}
	}
	if st := b.do(t, http.MethodGet, "/v1/votes/s1", insiderToken, "", nil); st.body["receipt"] == nil {
		t.Fatalf("the insider's receipt: %s", st.raw)
	}
}

func TestResultsTreeSize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, ledger.Poll{ID: "empty", Title: "Dinner", Choices: []string{"a"}})
	// A poll without votes has a log of one leaf, not the empty tree: leaf
	// 0 is the poll's definition.
	res := b.do(t, http.MethodGet, "/v1/polls/empty/results", b.token, "", nil)
	if res.code != http.StatusOK || res.body["total"] != float64(0) || res.body["tree_size"] != float64(1) {
		t.Fatalf("results of an empty poll: %d %s, want total 0 and tree_size 1 (its definition)", res.code, res.raw)
	}
	base := logSize(t, b, "p1")
	appendVotes(t, b, "x1", "x2", "x3")
	res = b.do(t, http.MethodGet, "/v1/polls/p1/results", b.token, "", nil)
	if res.code != http.StatusOK || res.body["total"] != float64(3) || res.body["tree_size"] != float64(base+3) {
		t.Fatalf("results of three votes: %d %s, want total 3 and tree_size %d", res.code, res.raw, base+3)
	}
}

// BenchmarkVoteStatus reads a recorded vote's status in a poll of 10,000
// leaves, with its receipt (a checkpoint covers it) and without.
func BenchmarkVoteStatus(b *testing.B) {
	f := setup(b, func(c *config) { c.ReadRate = math.Inf(1) })
	ctx := context.Background()
	events := make([]ledger.Event, 0, 10_000)
	for i := range cap(events) {
		who := "u" + strconv.Itoa(i) // the ledger keeps no principals' foreign key
		if i == 0 {
			who = f.who.ID
		}
		events = append(events, ledger.Event{PrincipalID: who, ClientEventID: "v" + strconv.Itoa(i), PollID: "p1",
			CandidateID: "a", ReceivedAt: time.Now()})
	}
	for chunk := range slices.Chunk(events, 1000) {
		if _, err := f.store.Append(ctx, chunk); err != nil {
			b.Fatal(err)
		}
	}
	get := func(b *testing.B, wantReceipt bool) {
		req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/votes/v0", nil)
		req.Header.Set("Authorization", "Bearer "+f.token)
		for b.Loop() {
			resp, err := f.client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || bytes.Contains(body, []byte(`"receipt"`)) != wantReceipt {
				b.Fatalf("%d %s", resp.StatusCode, body)
			}
		}
	}
	b.Run("no-receipt", func(b *testing.B) { get(b, false) })
	skey, _, _ := audit.GenerateKey(testLogName)
	signer, _ := audit.NewSigner(skey)
	h, err := f.store.Head(ctx, "p1")
	if err != nil {
		b.Fatal(err)
	}
	note, _ := audit.SignCheckpoint(signer, audit.Origin(testLogName, "p1"), h.Size, h.Root)
	if err := f.store.AddCheckpoint(ctx, "p1", h.Size, h.Root, string(note)); err != nil {
		b.Fatal(err)
	}
	b.Run("receipt", func(b *testing.B) { get(b, true) })
}
