package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// tally projector --workers N reaches the projector, which drains the
// stream with N workers.
func TestProjectorWorkers(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "lunch", Title: "Lunch?", OpensAt: time.Unix(0, 0), Choices: []string{"pizza"}}); err != nil {
		t.Fatal(err)
	}
	keys, _ := stream.NewKeys(prefix, 1)
	for _, p := range []string{"u1", "u2", "u3"} {
		e := stream.Entry{PrincipalID: p, ClientEventID: "e1", PollID: "lunch", CandidateID: "pizza",
			Fingerprint: ledger.FingerprintHex("lunch", "pizza"), ReceivedAt: time.Now()}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(0), Values: e.Values()}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan int, 1)
	var out, errOut bytes.Buffer
	go func() {
		runMu.Lock()
		defer runMu.Unlock()
		done <- Run(pctx, []string{"tally", "projector", "--workers", "3", "--batch-size", "1", "--batch-wait", "10ms",
			"--consumer", "cli-workers", "--database-url", db.URL, "--redis-url", testenv.RedisURL(),
			"--stream-prefix", prefix, "--log-format", "text"}, strings.NewReader(""), &out, &errOut)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for rdb.XLen(ctx, keys.Stream(0)).Val() != 0 {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("projector exited %d:\n%s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("projector did not stop within 15s of its context ending")
	}
	if res, err := store.Results(ctx, "lunch"); err != nil || res.Total != 3 {
		t.Fatalf("results %+v %v, want 3 votes; the projector's log:\n%s", res, err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "workers=3") {
		t.Errorf("the projector did not start with 3 workers; its log:\n%s", errOut.String())
	}
}

// An out-of-range worker count, from the flag or the environment, is
// refused before anything connects. Not parallel: it sets an environment
// variable.
func TestProjectorWorkersRefused(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
	}{
		{"", []string{"--workers", "0"}},
		{"", []string{"--workers", "17"}},
		{"-1", nil},
	} {
		if tc.env != "" {
			t.Setenv("TALLY_PROJECTOR_WORKERS", tc.env)
		}
		// An unreachable database: the check must come first.
		r := tallyWith(t, append([]string{"projector", "--database-url", "postgres://postgres@127.0.0.1:1/none", "--startup-wait", "0s"}, tc.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, "--workers must be between 1 and 16") {
			t.Errorf("projector %v (TALLY_PROJECTOR_WORKERS=%q): %+v, want a refusal of the worker count", tc.args, tc.env, r)
		}
	}
}
