package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tally/audit"
	"tally/internal/testenv"
)

// The projector given --log-key signs the poll's log; tally log checkpoint
// prints that checkpoint; tally export --checkpoints writes it beside the
// ledger, and tally audit verify accepts the two with the verifier key.
func TestProjectorSignsAndExportAudits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	skey := filepath.Join(dir, "log.key")
	gen := offline(t, "", "log", "key", "generate", "--name", "tally.test", "--out", skey)
	if gen.code != ExitOK {
		t.Fatalf("log key generate: %+v", gen)
	}
	vkey := filepath.Join(dir, "verifier.key")
	write(t, vkey, gen.stdout)

	f := newStreamFixture(t, "u1", "u2", "u3")
	if r := tally(t, f.db.URL, "log", "checkpoint", "--poll", "lunch"); r.code != ExitCheck || !strings.Contains(r.stderr, "--log-key") {
		t.Fatalf("log checkpoint before any was signed: %+v, want exit 1 saying how to get one", r)
	}
	signed := func() bool {
		c, err := f.store.LatestCheckpoint(f.ctx, "lunch")
		return err == nil && c.Size == 4 // the poll's definition and 3 votes
	}
	log := f.runProjector([]string{"--log-key", skey, "--checkpoint-interval", "20ms", "--batch-wait", "10ms",
		"--consumer", "cli-sign", "--database-url", testenv.DaemonLogin(t, f.db), "--redis-url", testenv.RedisURL(),
		"--stream-prefix", f.prefix, "--log-format", "text"},
		func() bool { return f.rdb.XLen(f.ctx, f.keys.Stream(0)).Val() == 0 && signed() })

	r := tally(t, f.db.URL, "log", "checkpoint", "--poll", "lunch")
	if r.code != ExitOK {
		t.Fatalf("log checkpoint: %+v; the projector's log:\n%s", r, log)
	}
	verifier, err := audit.NewVerifier(gen.stdout)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := audit.OpenCheckpoint([]byte(r.stdout), verifier, audit.Origin("tally.test", "lunch"))
	if err != nil || cp.Size != 4 {
		t.Fatalf("tally log checkpoint printed %q: %v (size %d), want a signed checkpoint of 4 leaves", r.stdout, err, cp.Size)
	}

	export, cps := filepath.Join(dir, "export.jsonl"), filepath.Join(dir, "checkpoints.jsonl")
	if r := tally(t, f.db.URL, "export", export, "--checkpoints", cps); r.code != ExitOK || !strings.Contains(r.stderr, "checkpoints") {
		t.Fatalf("export --checkpoints: %+v", r)
	}
	if b, err := os.ReadFile(cps); err != nil || !strings.Contains(string(b), `"size":4`) {
		t.Fatalf("checkpoints file %q (%v), want the checkpoint of size 4", b, err)
	}
	if r := offline(t, "", "audit", "verify", "--export", export, "--checkpoints", cps, "--key", vkey); r.code != ExitOK {
		t.Fatalf("audit verify of the export and its checkpoints: %+v", r)
	}
}

// A signer key file that is missing or not a signer key is refused at
// start, naming the flag, before anything connects.
func TestProjectorBadLogKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.key")
	write(t, bad, "not a key\n")
	for _, path := range []string{bad, filepath.Join(dir, "missing.key")} {
		r := tallyWith(t, "projector", "--log-key", path, "--database-url", "postgres://postgres@127.0.0.1:1/none", "--startup-wait", "0s")
		if r.code != ExitError || !strings.Contains(r.stderr, "--log-key") || !strings.Contains(r.stderr, "tally log key generate") {
			t.Errorf("projector --log-key %s: %+v, want a refusal naming --log-key and how to make a key", path, r)
		}
	}
}
