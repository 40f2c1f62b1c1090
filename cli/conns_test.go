package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"tally/internal/testenv"
)

// TestWaitFor checks the start-up wait's pace and its ends: one try when
// the wait is 0, tries until the server answers, gives up with the
// server's error once the wait has passed, and logs each failure.
func TestWaitFor(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	for _, tc := range []struct {
		name      string
		wait      time.Duration
		failures  int // pings that fail before one succeeds; -1: all fail
		wantTries int
		wantErr   bool
	}{
		{"no wait, down", 0, -1, 1, true},
		{"no wait, up", 0, 0, 1, false},
		{"comes up", time.Minute, 2, 3, false},
		// Pauses 0.5 s then 0.7 s (the rest of the wait): tries at 0, 0.5 and 1.2 s.
		{"stays down", 1200 * time.Millisecond, -1, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			tries := 0
			err := waitFor(context.Background(), "Redis", tc.wait, log, func(ctx context.Context) error {
				tries++
				if _, ok := ctx.Deadline(); !ok {
					t.Error("a try has no deadline")
				}
				if tc.failures < 0 || tries <= tc.failures {
					return refused
				}
				return nil
			})
			if tc.wantErr != (err != nil) || err != nil && !errors.Is(err, refused) {
				t.Fatalf("error %v, want the ping's error: %v", err, tc.wantErr)
			}
			if tries != tc.wantTries {
				t.Errorf("%d tries, want %d", tries, tc.wantTries)
			}
			if n := strings.Count(logs.String(), "waiting for Redis"); n != tc.wantTries-1 {
				t.Errorf("%d warnings, want one per failure followed by a try (%d):\n%s", n, tc.wantTries-1, logs.String())
			}
		})
	}
}

// The start-up wait ends as soon as its context does (Ctrl-C), with the
// server's last error rather than the cancellation.
func TestWaitForStopsOnCancel(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	err := waitFor(ctx, "PostgreSQL", time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(context.Context) error { return refused })
	if took := time.Since(start); took > time.Second {
		t.Errorf("waitFor took %s after its context ended at 200ms", took)
	}
	if !errors.Is(err, refused) {
		t.Errorf("error %v, want the ping's error", err)
	}
}

// A daemon waiting at start for a Redis that is down stops at once when
// it is told to stop (its context ends), exit 2, naming the server.
func TestDaemonStartupWaitStopsOnSignal(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	daemonURL := testenv.DaemonLogin(t, db)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done, errOut := runUntilLogged(t, ctx, []string{"intake", "--listen", "127.0.0.1:0", "--database-url", daemonURL,
		"--redis-url", "redis://127.0.0.1:1/0", "--startup-wait", "10m", "--log-format", "text"},
		"waiting for Redis", "intake did not wait for Redis")
	stopped := time.Now()
	stop()
	select {
	case code := <-done:
		if took := time.Since(stopped); took > 2*time.Second {
			t.Errorf("intake took %s to give up its start-up wait", took)
		}
		if code != ExitError || !strings.Contains(errOut.String(), "cannot reach Redis (--redis-mode single) at redis://127.0.0.1:1/0") {
			t.Errorf("intake stopped while waiting for Redis: exit %d\n%s\nwant exit 2 naming Redis", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("intake did not stop within 10s of its context ending")
	}
}

// A URL's password never reaches a message, whether net/url parses it or
// not (a primary and its standby: two host:port).
func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:secret@db:5432/tally", "postgres://u:xxxxx@db:5432/tally"},
		{"postgres://u:secret@db1:5432,db2:5432/tally?target_session_attrs=read-write", "postgres://u:xxxxx@db1:5432,db2:5432/tally?target_session_attrs=read-write"},
		{"postgres://u@db1:5432,db2:5432/tally", "postgres://u@db1:5432,db2:5432/tally"},
		{"redis://:secret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestDaemonsRefuseSuperuser: intake and projector refuse to start as a
// superuser, saying what to do; with --allow-superuser they start, and
// warn.
func TestDaemonsRefuseSuperuser(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t) // its URL logs in as the owner, a superuser
	_, prefix := testenv.Redis(t)
	common := []string{"--database-url", db.URL, "--redis-url", testenv.RedisURL(), "--stream-prefix", prefix,
		"--startup-wait", "0s", "--log-format", "text"}
	for _, daemon := range [][]string{{"intake", "--listen", "127.0.0.1:0"}, {"projector", "--consumer", "role-test"}} {
		r := tallyWith(t, append(daemon, common...)...)
		if r.code == 0 || !strings.Contains(r.stderr, "a superuser") || !strings.Contains(r.stderr, "tally_daemon") ||
			!strings.Contains(r.stderr, "--allow-superuser") {
			t.Errorf("tally %s as a superuser: exit %d, stderr:\n%s\nwant a refusal that names tally_daemon and --allow-superuser", daemon[0], r.code, r.stderr)
		}
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done, errOut := runUntilLogged(t, ctx, append([]string{"projector", "--consumer", "role-test", "--allow-superuser"}, common...),
		"--allow-superuser", "the projector with --allow-superuser did not warn")
	stop()
	if code := testenv.Receive(t, done, 30*time.Second, "the projector to stop"); code != 0 {
		t.Errorf("the projector with --allow-superuser exited %d:\n%s", code, errOut.String())
	}
}

// runUntilLogged runs tally with args in the background until ctx ends,
// and waits, at most 30s, for its log to say phrase (failing t with
// failure past that). It returns the channel of its exit code and its log.
func runUntilLogged(t *testing.T, ctx context.Context, args []string, phrase, failure string) (<-chan int, *testenv.LogBuffer) {
	t.Helper()
	done := make(chan int, 1)
	errOut := &testenv.LogBuffer{}
	go func() {
		runMu.Lock() // see runMu
		defer runMu.Unlock()
		done <- Run(ctx, append([]string{"tally"}, args...), strings.NewReader(""), io.Discard, errOut)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errOut.String(), phrase) {
		if time.Now().After(deadline) {
			t.Fatalf("%s:\n%s", failure, errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return done, errOut
}
