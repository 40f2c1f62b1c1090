package projector_test

import (
	"strings"
	"testing"
	"time"

	"tally/audit"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/projector"
)

// A projector given the log's key signs each poll's head once its votes
// are applied: the checkpoint opens with the verifier key, names the poll
// and carries the head's root at its size. A poll's log opens with its
// definition, so a poll without votes is signed too, at the head its
// creation left.
func TestProjectorSignsCheckpoints(t *testing.T) {
	t.Parallel()
	b := setup(t, withShards(2))
	b.poll("p1", "a", "b")
	b.poll("p2", "a", "b")
	b.poll("idle", "a")
	// The heads before any vote: each poll's definition (leaf 0), which
	// the votes follow.
	defined := map[string]int64{}
	for _, poll := range []string{"p1", "p2", "idle"} {
		head, err := b.store.Head(b.ctx, poll)
		if err != nil {
			t.Fatal(err)
		}
		if head.Size == 0 {
			t.Fatalf("poll %s: empty log after CreatePoll, want its definition", poll)
		}
		defined[poll] = head.Size
	}
	skey, vkey, err := audit.GenerateKey("tally.test")
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
	cfg := fast("c1")
	cfg.LogSigner = signer
	cfg.CheckpointInterval = 20 * time.Millisecond
	r := b.start(b.store, cfg)
	want := map[string]int64{"p1": defined["p1"] + 30, "p2": defined["p2"] + 7, "idle": defined["idle"]}
	b.enqueue(votes("x", 30, "p1", "a", "b")...)
	b.enqueue(votes("y", 7, "p2", "a", "b")...)
	b.waitDrained(10 * time.Second)

	latest := func(poll string) (ledger.Checkpoint, bool) {
		c, err := b.store.LatestCheckpoint(b.ctx, poll)
		return c, err == nil
	}
	testenv.Eventually(b.t, 10*time.Second, "a checkpoint of every poll's full log", func() bool {
		for poll, n := range want {
			if c, ok := latest(poll); !ok || c.Size != n {
				return false
			}
		}
		return true
	})
	for poll, n := range want {
		c, _ := latest(poll)
		cp, err := audit.OpenCheckpoint([]byte(c.Note), verifier, audit.Origin("tally.test", poll))
		if err != nil {
			t.Fatalf("checkpoint of %s does not open with the verifier key: %v\n%s", poll, err, c.Note)
		}
		head, err := b.store.Head(b.ctx, poll)
		if err != nil {
			t.Fatal(err)
		}
		if cp.Size != n || head.Size != n || cp.Root != head.Root {
			t.Errorf("poll %s: checkpoint size %d root %s, head size %d root %s; want both at %d with one root",
				poll, cp.Size, cp.Root, head.Size, head.Root, n)
		}
	}
	if got := r.metric("tally_projector_checkpoints_signed_total"); got < float64(len(want)) {
		t.Errorf("checkpoints signed: %v, want at least %d", got, len(want))
	}
	if got := r.metric("tally_projector_checkpoint_errors_total"); got != 0 {
		t.Errorf("checkpoint errors: %v, want 0", got)
	}
}

// A signer needs an applier that can store checkpoints, and a positive
// interval.
func TestCheckpointConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	skey, _, err := audit.GenerateKey("tally.test")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fast("c1")
	cfg.LogSigner = signer
	if _, err := projector.New(applierFunc(b.store.Append), b.rdb, b.keys, cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "Checkpointer") {
		t.Errorf("signer with an applier that cannot store checkpoints: %v, want an error naming Checkpointer", err)
	}
	cfg.CheckpointInterval = -time.Second
	if _, err := projector.New(b.store, b.rdb, b.keys, cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "checkpoint interval") {
		t.Errorf("negative checkpoint interval: %v, want an error naming it", err)
	}
}
