package audit_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
)

// Fixed keys, so that checkpoints (Ed25519 signatures are deterministic)
// and the example in docs/audit.md stay the same from run to run. The
// second key has the first one's name: a forger's key.
const (
	testSignerKey   = "PRIVATE+KEY+tally.example.org+41a1df5e+AfDkID/bb56GHEGliJeiBVY9MQyApS56m7QihN8ASE1j"
	testVerifierKey = "tally.example.org+41a1df5e+AWUbib1hbE6tZmGvs5AhwqgSkllQIG1EQQpS0JdUk60Y"
	forgerSignerKey = "PRIVATE+KEY+tally.example.org+31eba925+ASjSF7XWe0GJntWmGkITyXFDhpthQrZFp4zhqMmUPmuL"
	rotatedSigner   = "PRIVATE+KEY+tally.example.org-2027+5aa07027+AXoIbds1MOA9HiDYOf2Mz53Li112xKEsYaMSWX4n0y+f"
	rotatedVerifier = "tally.example.org-2027+5aa07027+AcnXJXgNZko0RHchKSWqXT0lH0d480h3Hn0k/mL4jUm4"
	testLogName     = "tally.example.org"
)

type keys struct {
	signer, forger, rotated note.Signer
	verifier, rotatedV      note.Verifier
}

func testKeys(t testing.TB) keys {
	t.Helper()
	var k keys
	var err error
	for _, s := range []struct {
		dst *note.Signer
		key string
	}{{&k.signer, testSignerKey}, {&k.forger, forgerSignerKey}, {&k.rotated, rotatedSigner}} {
		if *s.dst, err = audit.NewSigner(s.key); err != nil {
			t.Fatal(err)
		}
	}
	if k.verifier, err = audit.NewVerifier(testVerifierKey); err != nil {
		t.Fatal(err)
	}
	if k.rotatedV, err = audit.NewVerifier(rotatedVerifier); err != nil {
		t.Fatal(err)
	}
	return k
}

// failer is what the helpers need of a *testing.T or a *rapid.T.
type failer interface {
	Helper()
	Fatal(args ...any)
}

func sign(t failer, s note.Signer, origin string, size int64, root tlog.Hash) []byte {
	t.Helper()
	msg, err := audit.SignCheckpoint(s, origin, size, root)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func Example_checkpoint() {
	signer, _ := audit.NewSigner(testSignerKey)
	verifier, _ := audit.NewVerifier(testVerifierKey)
	var tree audit.Tree
	_ = tree.AppendLeaf(exampleLeaf)
	root, _ := tree.Root(1)
	origin := audit.Origin("tally.example.org", "lunch")
	msg, _ := audit.SignCheckpoint(signer, origin, 1, root)
	fmt.Print(string(msg))
	cp, err := audit.OpenCheckpoint(msg, verifier, origin)
	fmt.Println(cp.Size, cp.Root == root, err)
	// Output:
	// tally.example.org/polls/lunch
	// 1
	// Kng85plpqXgZCFHhpsAGFkgNupL0RFSXUB1d/o4Bap8=
	//
	// — tally.example.org QaHfXmZjbyvZeKOl9tGO1RnNc9SDvn2UFCPIAbeC+u/oZ7hsBacN7ILZXGUr+rIXFJxpPrX7atLwpRpN6LJ+HkP5NwU=
	// 1 true <nil>
}

func TestGenerateKey(t *testing.T) {
	skey, vkey, err := audit.GenerateKey("tally.test")
	if err != nil {
		t.Fatal(err)
	}
	s, err := audit.NewSigner(skey + "\n")
	if err != nil {
		t.Fatal(err)
	}
	v, err := audit.NewVerifier(vkey + "\n")
	if err != nil {
		t.Fatal(err)
	}
	origin := audit.Origin("tally.test", "p")
	if _, err := audit.OpenCheckpoint(sign(t, s, origin, 0, tlog.Hash{}), v, origin); err != nil {
		t.Fatalf("a checkpoint signed by a new key does not open with its verifier key: %v", err)
	}
	for _, name := range []string{"", "a b", "a+b", "tab\t", " lead", "\x01lead", "é\u200b"} {
		if _, _, err := audit.GenerateKey(name); err == nil {
			t.Errorf("GenerateKey(%q) made a key", name)
		}
	}
	if _, err := audit.NewVerifier(skey); err == nil || !strings.Contains(err.Error(), "signer key") {
		t.Errorf("a signer key taken as a verifier key: %v", err)
	}
	if _, err := audit.NewSigner(vkey); err == nil {
		t.Error("a verifier key taken as a signer key")
	}
}

func TestOpenCheckpointRefusals(t *testing.T) {
	k := testKeys(t)
	root := tlog.RecordHash([]byte("x"))
	origin := audit.Origin(testLogName, "lunch")
	good := sign(t, k.signer, origin, 7, root)
	// resign signs text as the log's key would, to test the body's checks.
	resign := func(text string) []byte {
		msg, err := note.Sign(&note.Note{Text: text}, k.signer)
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	rootB64 := root.String()
	for _, tc := range []struct {
		name string
		msg  []byte
		want error
		says string
	}{
		{"forged key", sign(t, k.forger, origin, 7, root), audit.ErrSignature, "not signed by key tally.example.org+41a1df5e"},
		{"changed size", bytes.Replace(good, []byte("\n7\n"), []byte("\n8\n"), 1), audit.ErrSignature, "does not match"},
		{"other poll", sign(t, k.signer, audit.Origin(testLogName, "dinner"), 7, root), audit.ErrOrigin, "dinner"},
		// Poll ids that are prefixes of each other, both ways round.
		{"poll lunch-2", sign(t, k.signer, audit.Origin(testLogName, "lunch-2"), 7, root), audit.ErrOrigin, `"tally.example.org/polls/lunch-2", not`},
		{"poll lunc", sign(t, k.signer, audit.Origin(testLogName, "lunc"), 7, root), audit.ErrOrigin, `"tally.example.org/polls/lunc", not`},
		{"other log", sign(t, k.rotated, audit.Origin("tally.example.org-2027", "lunch"), 7, root), audit.ErrSignature, "not signed"},
		{"extension line", resign(origin + "\n7\n" + rootB64 + "\nextra\n"), audit.ErrMalformed, "extension"},
		{"short root", resign(origin + "\n7\nAAAA\n"), audit.ErrMalformed, "root hash has 3 bytes"},
		{"leading zero", resign(origin + "\n07\n" + rootB64 + "\n"), audit.ErrMalformed, "canonical"},
		{"negative size", resign(origin + "\n-7\n" + rootB64 + "\n"), audit.ErrMalformed, "size"},
		{"huge size", resign(origin + "\n9223372036854775808\n" + rootB64 + "\n"), audit.ErrMalformed, "too large"},
		{"two lines", resign(origin + "\n7\n"), audit.ErrMalformed, "newlines"},
		{"not a note", []byte(origin + "\n7\n" + rootB64 + "\n"), audit.ErrMalformed, "not a signed note"},
		{"empty", nil, audit.ErrMalformed, "not a signed note"},
	} {
		_, err := audit.OpenCheckpoint(tc.msg, k.verifier, origin)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %v, want %v saying %q", tc.name, err, tc.want, tc.says)
		}
	}
	if _, err := audit.OpenCheckpoint(good, k.verifier, origin); err != nil {
		t.Fatalf("the good checkpoint: %v", err)
	}
	// The largest size there is opens: it is below, not at, the limit.
	if cp, err := audit.OpenCheckpoint(sign(t, k.signer, origin, math.MaxInt64, root), k.verifier, origin); err != nil || cp.Size != math.MaxInt64 {
		t.Fatalf("a checkpoint of size MaxInt64: %+v, %v", cp, err)
	}
}

// SignCheckpoint signs only an origin of one line of printable text (a
// control character anywhere, the first one included, is refused) and a
// size of 0 or more.
func TestSignCheckpointRefusals(t *testing.T) {
	k := testKeys(t)
	for _, tc := range []struct {
		origin string
		size   int64
		says   string
	}{
		{"", 1, "one line"},
		{"\nlunch", 1, "one line"},
		{"\tlunch", 1, "one line"},
		{"lunch\n", 1, "one line"},
		{"lu\x00nch", 1, "one line"},
		{"lunch\xff", 1, "one line"},
		{"lunch", -1, "negative"},
	} {
		if _, err := audit.SignCheckpoint(k.signer, tc.origin, tc.size, tlog.Hash{}); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("origin %q size %d: error %v, want one saying %q", tc.origin, tc.size, err, tc.says)
		}
	}
	if _, err := audit.SignCheckpoint(k.signer, "lunch", 0, tlog.Hash{}); err != nil {
		t.Errorf("a checkpoint of the empty tree: %v", err)
	}
}

// A checkpoint cosigned by a witness still opens with the log's key alone.
func TestOpenCheckpointCosigned(t *testing.T) {
	k := testKeys(t)
	origin := audit.Origin(testLogName, "lunch")
	n, err := note.Open(sign(t, k.signer, origin, 3, tlog.Hash{1}), note.VerifierList(k.verifier))
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := note.Sign(n, k.rotated)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := audit.OpenCheckpoint(cosigned, k.verifier, origin)
	if err != nil || cp.Size != 3 || cp.PollID() != "lunch" {
		t.Fatalf("cosigned checkpoint: %+v, %v", cp, err)
	}
}

func TestReadCheckpoints(t *testing.T) {
	var buf bytes.Buffer
	want := []audit.StoredCheckpoint{{PollID: "lunch", Size: 2, Checkpoint: "text\n\n— sig\n"}, {PollID: "lunch", Size: 0, Checkpoint: "empty"}}
	for _, c := range want {
		if err := audit.WriteCheckpoint(&buf, c); err != nil {
			t.Fatal(err)
		}
		buf.WriteString("\n")
	}
	got, err := audit.ReadCheckpoints(&buf)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, want)
	}
	for _, tc := range []struct{ in, says string }{
		{`{"poll_id":"a b","size":1,"checkpoint":"x"}`, "line 1: poll_id"},
		{"\n" + `{"poll_id":"p","size":-1,"checkpoint":"x"}`, "line 2: size -1"},
		{`{"poll_id":"p","size":1}`, "checkpoint is missing"},
		{`{"poll_id":"p","size":"1","checkpoint":"x"}`, "line 1"},
		{`not json`, "line 1"},
		{"\n\n" + `{"poll_id":"p","size":1,"checkpoint":"` + strings.Repeat("x", 1<<20) + `"}`, "line 3 is longer than"},
	} {
		if _, err := audit.ReadCheckpoints(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %v, want one saying %q", tc.in, err, tc.says)
		}
	}
}

// FuzzOpenCheckpoint: whatever the bytes, OpenCheckpoint does not panic,
// and what it accepts is exactly the checkpoint SignCheckpoint writes for
// the tree head it returns.
func FuzzOpenCheckpoint(f *testing.F) {
	k := testKeys(f)
	origin := audit.Origin(testLogName, "lunch")
	f.Add(sign(f, k.signer, origin, 7, tlog.RecordHash([]byte("x"))))
	f.Add(sign(f, k.signer, origin, 0, tlog.Hash{}))
	f.Add(sign(f, k.forger, origin, 1, tlog.Hash{}))
	f.Add([]byte(origin + "\n1\n\n\n— tally.example.org QaHfXhb8\n"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		cp, err := audit.OpenCheckpoint(msg, k.verifier, origin)
		if err != nil {
			return
		}
		again := sign(t, k.signer, cp.Origin, cp.Size, cp.Root)
		if !bytes.Equal(again, msg) {
			t.Fatalf("accepted a checkpoint that is not what its signer writes:\n%q\n%q", msg, again)
		}
	})
}
