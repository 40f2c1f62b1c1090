package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/intake"
	"tally/internal/apitest"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// TestProjectorStatusDeadletter runs tally projector on a stream holding a
// good vote and an undecodable entry, then reads the outcome with tally
// status and tally deadletter, as an operator would.
func TestProjectorStatusDeadletter(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t, "u1")
	ctx, rdb, keys, store, prefix, db := f.ctx, f.rdb, f.keys, f.store, f.prefix, f.db
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(0), Values: []string{"v", "1", "junk", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	common := []string{"--database-url", db.URL, "--redis-url", testenv.RedisURL(), "--stream-prefix", prefix, "--log-format", "text"}

	// The projector runs until both entries left the stream.
	daemon := []string{"--database-url", testenv.DaemonLogin(t, db), "--redis-url", testenv.RedisURL(), "--stream-prefix", prefix, "--log-format", "text"}
	f.runProjector(append([]string{"--batch-wait", "10ms", "--consumer", "cli-test"}, daemon...), func() bool {
		return rdb.XLen(ctx, keys.Stream(0)).Val() == 0 && rdb.XLen(ctx, keys.DeadLetter(0)).Val() == 1
	})

	if res, err := store.Results(ctx, "lunch"); err != nil || res.Total != 1 {
		t.Fatalf("results %+v %v, want the good vote recorded", res, err)
	}
	r := tallyWith(t, append([]string{"status", "--format", "json"}, common...)...)
	var st struct {
		Total struct {
			Backlog     int64 `json:"backlog"`
			Pending     int64 `json:"pending"`
			DeadLetters int64 `json:"dead_letters"`
		} `json:"total"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil {
		t.Fatalf("status: %+v (%v)", r, err)
	}
	if st.Total.Backlog != 0 || st.Total.Pending != 0 || st.Total.DeadLetters != 1 {
		t.Fatalf("status %+v, want backlog 0, pending 0, 1 dead letter", st.Total)
	}
	r = tallyWith(t, append([]string{"deadletter", "list"}, common...)...)
	if r.code != 0 || !strings.Contains(strings.ToLower(r.stdout), "undecodable") {
		t.Fatalf("deadletter list: %+v", r)
	}
	r = tallyWith(t, append([]string{"deadletter", "purge", "--all"}, common...)...)
	if r.code == 0 && rdb.XLen(ctx, keys.DeadLetter(0)).Val() != 1 {
		t.Fatalf("purge without --yes deleted: %+v", r)
	}
	r = tallyWith(t, append([]string{"deadletter", "purge", "--all", "--yes"}, common...)...)
	if r.code != 0 || rdb.XLen(ctx, keys.DeadLetter(0)).Val() != 0 {
		t.Fatalf("purge --all --yes: %+v", r)
	}
}

// streamFixture is a ledger with the poll "lunch" (one choice, pizza) and
// a one-shard stream holding a vote for it from each principal given.
type streamFixture struct {
	t      *testing.T
	ctx    context.Context
	db     testenv.DB
	rdb    *redis.Client
	prefix string
	keys   stream.Keys
	store  *ledger.Store
}

func newStreamFixture(t *testing.T, principals ...string) streamFixture {
	t.Helper()
	f := streamFixture{t: t, ctx: context.Background(), db: testenv.Postgres(t)}
	f.rdb, f.prefix = testenv.Redis(t)
	var err error
	if f.store, err = ledger.New(f.db.Pool, ledger.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := f.store.CreatePoll(f.ctx, ledger.Poll{ID: "lunch", Title: "Lunch?", OpensAt: time.Unix(0, 0), Choices: []string{"pizza"}}); err != nil {
		t.Fatal(err)
	}
	if f.keys, err = stream.NewKeys(f.prefix, 1); err != nil {
		t.Fatal(err)
	}
	for _, p := range principals {
		e := stream.Entry{PrincipalID: p, ClientEventID: "e1", PollID: "lunch", CandidateID: "pizza", ReceivedAt: time.Now()}
		if err := f.rdb.XAdd(f.ctx, &redis.XAddArgs{Stream: f.keys.Stream(0), Values: stream.Values(e)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// runProjector runs tally projector with args until done holds (at most
// 20s), stops it the way SIGTERM does, fails unless it exits 0, and
// returns its log.
func (f streamFixture) runProjector(args []string, done func() bool) string {
	f.t.Helper()
	pctx, stop := context.WithCancel(f.ctx)
	defer stop()
	exited := make(chan int, 1)
	var out, errOut bytes.Buffer
	go func() {
		runMu.Lock() // see runMu; released when the projector stops
		defer runMu.Unlock()
		exited <- Run(pctx, append([]string{"tally", "projector"}, args...), strings.NewReader(""), &out, &errOut)
	}()
	drained := false
	defer func() {
		if !drained { // its log, once it stopped writing it
			stop()
			testenv.Receive(f.t, exited, 15*time.Second, "the projector to stop once its context ended")
			f.t.Logf("the projector's log:\n%s", errOut.String())
		}
	}()
	testenv.Eventually(f.t, 20*time.Second, "the projector to drain the stream", done)
	drained = true
	stop()
	select {
	case code := <-exited:
		if code != 0 {
			f.t.Fatalf("projector exited %d:\n%s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		f.t.Fatal("projector did not stop within 15s of its context ending")
	}
	return errOut.String()
}

// tallyWith runs the command line as given, without the database flags
// tally adds.
func tallyWith(t *testing.T, args ...string) run {
	t.Helper()
	runMu.Lock()
	defer runMu.Unlock()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), append([]string{"tally"}, args...), strings.NewReader(""), &out, &errOut)
	return run{code, out.String(), errOut.String()}
}

// TestIntakeCommand runs tally intake, casts a vote through it and stops it
// the way SIGTERM does (its context ends): it must exit 0.
func TestIntakeCommand(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "lunch", Title: "Lunch?", Choices: []string{"pizza"}}); err != nil {
		t.Fatal(err)
	}
	keyFile := credentialKeyFile(t)
	_, token := signedToken(t, store, keyFile, "alice")
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}

	daemonURL := testenv.DaemonLogin(t, db)
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		runMu.Lock() // see runMu
		defer runMu.Unlock()
		done <- Run(ictx, []string{"tally", "intake", "--listen", addr, "--database-url", daemonURL, "--credential-key", keyFile,
			"--redis-url", testenv.RedisURL(), "--stream-prefix", prefix, "--log-format", "json"},
			strings.NewReader(""), io.Discard, &errOut)
	}()
	client := apiClient(t)
	var resp *http.Response
	testenv.Eventually(t, 15*time.Second, "intake to answer a vote", func() error {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/votes",
			strings.NewReader(`{"event_id":"e1","poll_id":"lunch","candidate_id":"pizza"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err = client.Do(req)
		return err
	})
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/votes: %s", resp.Status)
	}
	keys, _ := stream.NewKeys(prefix, 1)
	if n := rdb.XLen(ctx, keys.Stream(0)).Val(); n != 1 {
		t.Fatalf("stream holds %d entries after one 202, want 1", n)
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("intake exited %d:\n%s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("intake did not stop within 15s")
	}
	if strings.Contains(errOut.String(), token) {
		t.Fatal("intake logged a bearer token")
	}
}

// TestDaemonWaitsForRedisAtStart starts tally intake while its Redis is
// down: it keeps trying (--startup-wait) and serves once Redis is up.
func TestDaemonWaitsForRedisAtStart(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	srv := testenv.StartRedis(t)
	srv.Kill()
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	daemonURL := testenv.DaemonLogin(t, db)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done, errOut := runBackground(ctx, "intake", "--listen", addr, "--database-url", daemonURL,
		"--redis-url", srv.URL(), "--startup-wait", "30s", "--log-format", "json")
	// It tried, failed and tried again: it waits, rather than gave up.
	testenv.Eventually(t, 15*time.Second, "intake to log its second wait for Redis", func() bool {
		return strings.Count(errOut.String(), "waiting for Redis") >= 2
	})
	select {
	case code := <-done:
		t.Fatalf("intake gave up while Redis was down (exit %d):\n%s", code, errOut.String())
	default:
	}
	srv.Start()
	client := apiClient(t)
	testenv.Eventually(t, 20*time.Second, "intake to serve after Redis came up", func() error {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			return fmt.Errorf("%w; its log:\n%s", err, errOut.String())
		}
		resp.Body.Close()
		return nil
	})
	stop()
	if code := testenv.Receive(t, done, 15*time.Second, "intake to stop once its context ended"); code != 0 {
		t.Fatalf("intake exited %d", code)
	}
}

// apiClient is a client whose every exchange with intake is checked
// against intake's OpenAPI document, failing t on a mismatch.
func apiClient(t *testing.T) *http.Client {
	t.Helper()
	api, err := apitest.Load(intake.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: api.Transport(t, tr), Timeout: 10 * time.Second}
}
