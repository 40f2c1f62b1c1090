package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
)

// offline runs a command that needs no database, as a user would.
func offline(t *testing.T, stdin string, args ...string) run {
	t.Helper()
	runMu.Lock()
	defer runMu.Unlock()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), append([]string{"tally"}, args...), strings.NewReader(stdin), &out, &errOut)
	return run{code, out.String(), errOut.String()}
}

func TestLogKeyGenerate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "log.key")
	r := offline(t, "", "log", "key", "generate", "--name", "tally.test", "--out", out)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("signer key file: %v, mode %v, want 0600", err, st.Mode())
	}
	skey, _ := os.ReadFile(out)
	signer, err := audit.NewSigner(string(skey))
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := audit.NewVerifier(r.stdout)
	if err != nil {
		t.Fatalf("standard output %q is not the verifier key: %v", r.stdout, err)
	}
	origin := audit.Origin("tally.test", "p")
	msg, _ := audit.SignCheckpoint(signer, origin, 0, tlog.Hash{})
	if _, err := audit.OpenCheckpoint(msg, verifier, origin); err != nil {
		t.Fatalf("the printed verifier key does not verify the written signer key: %v", err)
	}

	if r := offline(t, "", "log", "key", "generate", "--name", "tally.test", "--out", out); r.code != ExitError || !strings.Contains(r.stderr, "--force") {
		t.Errorf("overwrite without --force: exit %d, %q", r.code, r.stderr)
	}
	if again, _ := os.ReadFile(out); !bytes.Equal(again, skey) {
		t.Error("the signer key was replaced without --force")
	}
	os.Chmod(out, 0o644)
	if r := offline(t, "", "log", "key", "generate", "--name", "tally.test", "--out", out, "--force"); r.code != ExitOK {
		t.Errorf("--force: exit %d, %s", r.code, r.stderr)
	}
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o600 {
		t.Errorf("after --force the mode is %v", st.Mode())
	}
	if r := offline(t, "", "log", "key", "generate", "--name", "bad name", "--out", filepath.Join(dir, "x")); r.code != ExitError {
		t.Errorf("a name with a space: exit %d", r.code)
	}
}

// auditFiles is a poll's export, checkpoints and results on disk, with
// the key that signed them.
type auditFiles struct {
	dir, export, checkpoints, results, key string
	signer                                 note.Signer
	tree                                   *audit.Tree
	leaves                                 []audit.Leaf
}

func writeAuditFiles(t *testing.T) auditFiles {
	t.Helper()
	f := auditFiles{dir: t.TempDir()}
	skey, vkey, err := audit.GenerateKey("tally.test")
	if err != nil {
		t.Fatal(err)
	}
	f.signer, _ = audit.NewSigner(skey)
	f.key = filepath.Join(f.dir, "verifier.key")
	write(t, f.key, vkey+"\n")
	var export, cps bytes.Buffer
	f.tree = &audit.Tree{}
	enc := json.NewEncoder(&export)
	for i := range 12 {
		l := audit.Leaf{PollID: "lunch", CandidateID: []string{"soup", "salad", "soup"}[i%3], PrincipalID: "p-" + strconv.Itoa(i),
			ClientEventID: "e-" + strconv.Itoa(i), ReceivedAt: time.Date(2026, 3, 1, 12, 0, i, 1000, time.UTC)}
		f.leaves = append(f.leaves, l)
		if err := enc.Encode(audit.ExportRow{Seq: int64(i + 1), EventID: l.ClientEventID, PollID: l.PollID, CandidateID: l.CandidateID,
			PrincipalID: l.PrincipalID, ReceivedAt: l.ReceivedAt, RecordedAt: l.ReceivedAt.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
		if err := f.tree.AppendLeaf(l); err != nil {
			t.Fatal(err)
		}
		if (i+1)%4 == 0 {
			audit.WriteCheckpoint(&cps, audit.StoredCheckpoint{PollID: "lunch", Size: f.tree.Size(), Checkpoint: string(f.checkpoint(t, f.tree.Size()))})
		}
	}
	f.export, f.checkpoints, f.results = filepath.Join(f.dir, "export.jsonl"), filepath.Join(f.dir, "checkpoints.jsonl"), filepath.Join(f.dir, "results.json")
	write(t, f.export, export.String())
	write(t, f.checkpoints, cps.String())
	write(t, f.results, `{"poll_id":"lunch","results":[{"candidate_id":"salad","votes":4},{"candidate_id":"soup","votes":8}],"total":12,"as_of":"2026-03-01T12:01:00Z"}`+"\n")
	return f
}

func (f auditFiles) checkpoint(t *testing.T, size int64) []byte {
	root, err := f.tree.Root(size)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := audit.SignCheckpoint(f.signer, audit.Origin("tally.test", "lunch"), size, root)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestAuditVerifyExitCodes(t *testing.T) {
	t.Parallel()
	f := writeAuditFiles(t)
	args := []string{"audit", "verify", "--export", f.export, "--checkpoints", f.checkpoints, "--key", f.key, "--results", f.results, "--before-definitions", "lunch"}
	r := offline(t, "", args...)
	if r.code != ExitOK || !strings.Contains(r.stdout, "OK: 12 events in 1 polls; all 3 checkpoints") ||
		!strings.Contains(r.stdout, "every leaf is under a signed checkpoint") {
		t.Fatalf("clean audit: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Without the last checkpoint, its 4 leaves are vouched for by the
	// export alone, and the OK line says so.
	cps, _ := os.ReadFile(f.checkpoints)
	fewer := filepath.Join(t.TempDir(), "fewer.jsonl")
	write(t, fewer, strings.Join(strings.SplitAfter(string(cps), "\n")[:2], ""))
	r = offline(t, "", "audit", "verify", "--export", f.export, "--checkpoints", fewer, "--key", f.key, "--before-definitions", "lunch")
	if r.code != ExitOK || !strings.Contains(r.stdout, "4 of the 12 leaves are past the largest checkpoint of their poll: no checkpoint signs them") {
		t.Fatalf("audit with the last checkpoint left out: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	vkey, _ := os.ReadFile(f.key)
	r = offline(t, "", "audit", "verify", "--export", f.export, "--checkpoints", f.checkpoints, "--key", strings.TrimSpace(string(vkey)), "--format", "json", "--before-definitions", "lunch")
	var rep audit.Report
	if r.code != ExitOK || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Rows != 12 || !rep.OK() {
		t.Fatalf("key given as text, --format json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A changed candidate at leaf 5: the checkpoint of size 8 names it
	// among leaves 4-7, and the published results no longer match.
	b, _ := os.ReadFile(f.export)
	lines := strings.SplitAfter(string(b), "\n")
	lines[5] = strings.Replace(lines[5], `"candidate_id":"soup"`, `"candidate_id":"salad"`, 1)
	write(t, f.export, strings.Join(lines, ""))
	r = offline(t, "", args...)
	if r.code != ExitCheck || !strings.Contains(r.stdout, "DISCREPANCY: poll lunch, leaves 4-7, checkpoint line 2") ||
		!strings.Contains(r.stdout, "field votes") || !strings.Contains(r.stdout, "MISMATCH") {
		t.Fatalf("tampered export: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	for name, bad := range map[string][]string{
		"missing export":   {"audit", "verify", "--export", filepath.Join(f.dir, "none"), "--checkpoints", f.checkpoints, "--key", f.key},
		"bad key":          {"audit", "verify", "--export", f.export, "--checkpoints", f.checkpoints, "--key", "not-a-key"},
		"signer as key":    {"audit", "verify", "--export", f.export, "--checkpoints", f.checkpoints, "--key", f.export},
		"no checkpoints":   {"audit", "verify", "--export", f.export, "--key", f.key},
		"malformed export": {"audit", "verify", "--export", f.key, "--checkpoints", f.checkpoints, "--key", f.key},
	} {
		if r := offline(t, "", bad...); r.code != ExitError || r.stderr == "" {
			t.Errorf("%s: exit %d, stderr %q", name, r.code, r.stderr)
		}
	}
}

// writeReceipt writes the receipt of leaf under the checkpoint of size
// into the fixture's directory and returns its path and the receipt.
func (f auditFiles) writeReceipt(t *testing.T, leaf, size int64) (string, audit.Receipt) {
	t.Helper()
	proof, _ := f.tree.InclusionProof(leaf, size)
	rc, err := audit.NewReceipt(f.leaves[leaf], leaf, size, f.checkpoint(t, size), proof)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rc)
	receipt := filepath.Join(f.dir, "receipt.json")
	write(t, receipt, string(b))
	return receipt, rc
}

func TestAuditReceiptExitCodes(t *testing.T) {
	t.Parallel()
	f := writeAuditFiles(t)
	receipt, rc := f.writeReceipt(t, 5, 8)
	b, _ := os.ReadFile(receipt)
	if r := offline(t, "", "audit", "receipt", receipt, "--key", f.key); r.code != ExitOK || !strings.Contains(r.stdout, "is leaf 5 of the tree of size 8") {
		t.Fatalf("valid receipt: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	status := `{"event_id":"e-5","status":"recorded","receipt":` + string(b) + `}`
	if r := offline(t, status, "audit", "receipt", "-", "--key", f.key); r.code != ExitOK {
		t.Fatalf("receipt inside a vote's status on standard input: exit %d %s", r.code, r.stderr)
	}
	// A status without a receipt yet, whole or as the null jq makes of it,
	// is named as such, not as a malformed receipt.
	for _, in := range []string{`{"event_id":"e-5","poll_id":"p","candidate_id":"a","status":"pending"}`, "null\n"} {
		if r := offline(t, in, "audit", "receipt", "-", "--key", f.key); r.code != ExitError || !strings.Contains(r.stderr, "standard input holds no receipt yet") {
			t.Fatalf("a status with no receipt (%s): exit %d %s", in, r.code, r.stderr)
		}
	}

	later := filepath.Join(f.dir, "later.txt")
	write(t, later, string(f.checkpoint(t, 12)))
	cproof, _ := f.tree.ConsistencyProof(8, 12)
	r8, _ := f.tree.Root(8)
	r12, _ := f.tree.Root(12)
	pb, _ := json.Marshal(audit.ConsistencyProof{PollID: "lunch", From: 8, To: 12, Proof: cproof, FromRoot: r8, ToRoot: r12})
	consistency := filepath.Join(f.dir, "consistency.json")
	write(t, consistency, string(pb))
	if r := offline(t, "", "audit", "receipt", receipt, "--key", f.key, "--checkpoint", later, "--consistency", consistency); r.code != ExitOK ||
		!strings.Contains(r.stdout, "later checkpoint (size 12) still holds") {
		t.Fatalf("later checkpoint: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	cproof[0][0] ^= 1
	pb, _ = json.Marshal(audit.ConsistencyProof{PollID: "lunch", From: 8, To: 12, Proof: cproof, FromRoot: r8, ToRoot: r12})
	write(t, consistency, string(pb))
	if r := offline(t, "", "audit", "receipt", receipt, "--key", f.key, "--checkpoint", later, "--consistency", consistency); r.code != ExitCheck ||
		!strings.Contains(r.stdout, "REFUSED") {
		t.Fatalf("bad consistency proof: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	changed := rc
	changed.CandidateID = "salad"
	b, _ = json.Marshal(changed)
	write(t, receipt, string(b))
	if r := offline(t, "", "audit", "receipt", receipt, "--key", f.key); r.code != ExitCheck || !strings.Contains(r.stdout, "REFUSED") {
		t.Fatalf("changed receipt: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	_, otherKey, _ := audit.GenerateKey("tally.test")
	write(t, receipt, string(b[:len(b)/2]))
	for name, args := range map[string][]string{
		"malformed receipt": {"audit", "receipt", receipt, "--key", f.key},
		"no file":           {"audit", "receipt", "--key", f.key},
		"proof alone":       {"audit", "receipt", receipt, "--key", f.key, "--consistency", consistency},
		"missing receipt":   {"audit", "receipt", filepath.Join(f.dir, "none"), "--key", otherKey},
	} {
		if r := offline(t, "", args...); r.code != ExitError || r.stderr == "" {
			t.Errorf("%s: exit %d, stderr %q", name, r.code, r.stderr)
		}
	}
}

// A consistency proof or a later checkpoint of another poll is refused,
// naming both polls, even where the proof would hold: between equal sizes
// every proof is empty, and a relabelled proof of the receipt's own poll
// still leads to the right roots.
func TestAuditReceiptRefusesAnotherPoll(t *testing.T) {
	t.Parallel()
	f := writeAuditFiles(t)
	receipt, _ := f.writeReceipt(t, 5, 8)
	cproof, _ := f.tree.ConsistencyProof(8, 12)
	root8, _ := f.tree.Root(8)
	dinner8, err := audit.SignCheckpoint(f.signer, audit.Origin("tally.test", "dinner"), 8, root8)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		checkpoint []byte
		proof      audit.ConsistencyProof
		says       []string
	}{
		{"proof of another poll, equal sizes", f.checkpoint(t, 8), audit.ConsistencyProof{PollID: "dinner", From: 8, To: 8},
			[]string{`poll "dinner"`, `poll "lunch"`, "use the consistency proof of poll lunch"}},
		{"proof of another poll", f.checkpoint(t, 12), audit.ConsistencyProof{PollID: "dinner", From: 8, To: 12, Proof: cproof},
			[]string{`poll "dinner"`, `poll "lunch"`, "use the consistency proof of poll lunch"}},
		{"later checkpoint of another poll", dinner8, audit.ConsistencyProof{PollID: "lunch", From: 8, To: 8},
			[]string{"tally.test/polls/dinner", "tally.test/polls/lunch", "use a later checkpoint of poll lunch"}},
	} {
		later := filepath.Join(f.dir, "later.txt")
		consistency := filepath.Join(f.dir, "consistency.json")
		if tc.proof.Proof == nil {
			tc.proof.Proof = tlog.TreeProof{}
		}
		tc.proof.FromRoot, _ = f.tree.Root(tc.proof.From)
		tc.proof.ToRoot, _ = f.tree.Root(tc.proof.To)
		pb, _ := json.Marshal(tc.proof)
		write(t, later, string(tc.checkpoint))
		write(t, consistency, string(pb))
		r := offline(t, "", "audit", "receipt", receipt, "--key", f.key, "--checkpoint", later, "--consistency", consistency)
		if r.code != ExitCheck || !strings.Contains(r.stdout, "REFUSED") {
			t.Errorf("%s: exit %d, want %d and REFUSED\n%s%s", tc.name, r.code, ExitCheck, r.stdout, r.stderr)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("%s: %q does not say %q", tc.name, r.stdout, s)
			}
		}
	}
}

// Both audit commands print the one exit code table of docs/audit.md.
func TestAuditHelpExitCodes(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"verify", "receipt"} {
		r := offline(t, "", "audit", cmd, "--help")
		for _, line := range []string{"Exit codes:", "0  it verifies", "1  the files were read and do not verify",
			"A well-formed --key that did not sign", "2  the check could not be made"} {
			if !strings.Contains(r.stdout, line) {
				t.Errorf("tally audit %s --help does not say %q:\n%s", cmd, line, r.stdout)
			}
		}
	}
}
