package loadtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tally/cli"
	"tally/credential"
	"tally/intake"
	"tally/internal/apitest"
	"tally/internal/loadtest"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/projector"
	"tally/stream"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m))
}

// pipeline is an intake and a projector, in process, on a fresh database
// and a unique stream prefix.
type pipeline struct {
	db    testenv.DB
	store *ledger.Store
	queue loadtest.Queue
	rdb   *redis.Client
	keys  stream.Keys
	url   string
	// client sends the votes, each exchange checked against intake's
	// OpenAPI document.
	client *http.Client
	// key signs the principals' tokens, and intake takes it; keyFile
	// holds it, for tally loadtest --credential-key.
	key     credential.Key
	keyFile string
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("TALLY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// setup starts an intake, and a projector when withProjector.
func setup(t *testing.T, withProjector bool) *pipeline {
	t.Helper()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	keys, err := stream.NewKeys(prefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	log := testLogger(t)

	key, keyFile := credentialKey(t)
	keySet, err := credential.NewKeySet(key)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := intake.New(intake.Config{Rate: 10_000, Burst: 10_000, Credentials: credential.NewVerifier(keySet)},
		store, rdb, keys, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proj, err := projector.New(store, rdb, keys, projector.Config{
		Consumer: "lt-test", BatchSize: 500, BatchWait: 10 * time.Millisecond,
		MinIdle: 5 * time.Second, BackoffMin: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		StatsInterval: time.Second,
	}, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ctx, ln); err != nil {
			t.Errorf("intake: %v", err)
		}
	})
	if withProjector {
		wg.Go(func() {
			if err := proj.Run(ctx); err != nil {
				t.Errorf("projector: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		testenv.WaitGroup(t, &wg, 20*time.Second, "intake and the projector to stop once their context ended")
	})
	return &pipeline{db: db, store: store, queue: loadtest.RedisQueue(rdb, keys), rdb: rdb, keys: keys, url: "http://" + ln.Addr().String(),
		client: checkedClient(t), key: key, keyFile: keyFile}
}

// credentialKey is a fresh credential key and the file that holds it.
func credentialKey(t *testing.T) (credential.Key, string) {
	t.Helper()
	key, err := credential.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	data, err := key.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "credential.key")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return key, file
}

// checkedClient is a client whose exchanges are checked against intake's
// OpenAPI document, failing t on a mismatch: the first 20 of each route
// and status, then one in 50 (a check costs milliseconds).
func checkedClient(t *testing.T) *http.Client {
	t.Helper()
	api, err := apitest.Load(intake.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: api.SampledTransport(t, tr, 20, 50)}
}

func (p *pipeline) deps() loadtest.Deps {
	return loadtest.Deps{Store: p.store, Queue: p.queue, Client: p.client, Key: &p.key}
}

// A mixed load through a real intake and projector verifies: nothing lost,
// nothing counted twice, and every count is what the mix implies.
func TestLoadtestVerifies(t *testing.T) {
	t.Parallel()
	p := setup(t, true)
	var progress []loadtest.Progress
	var mu sync.Mutex
	cfg := loadtest.Config{
		Targets:             []string{p.url},
		Votes:               2000,
		Concurrency:         16,
		Principals:          50,
		PollChoices:         4,
		RetryShare:          0.10,
		KeyReuseShare:       0.05,
		SecondResponseShare: 0.10,
		DrainTimeout:        30 * time.Second,
		ProgressEvery:       50 * time.Millisecond,
		Progress: func(pr loadtest.Progress) {
			mu.Lock()
			progress = append(progress, pr)
			mu.Unlock()
		},
		Seed:   42,
		Logger: testLogger(t),
	}
	rep, err := loadtest.Run(context.Background(), cfg, p.deps())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("report: %+v", rep)
	if !rep.Passed() {
		t.Fatalf("verification failed: %s", strings.Join(rep.Failures(), "\n"))
	}
	if rep.Lost != 0 || rep.CountedTwice != 0 {
		t.Errorf("lost %d, counted twice %d; want 0 and 0", rep.Lost, rep.CountedTwice)
	}
	by := rep.AttemptedByKind
	ok := rep.AcceptedByKind
	if rep.Attempted != 2000 || by["first_response"]+by["second_response"]+by["exact_retry"]+by["key_reuse"] != 2000 {
		t.Errorf("attempted %d by kind %v; want 2000", rep.Attempted, by)
	}
	for _, k := range []string{"second_response", "exact_retry", "key_reuse"} {
		if by[k] == 0 {
			t.Errorf("no %s was sent: %v", k, by)
		}
	}
	// Every vote but key reuse is answered 202; key reuse 409.
	if rep.Accepted != rep.Attempted-by["key_reuse"] || ok["key_reuse"] != 0 {
		t.Errorf("accepted %d (%v) of %d; want all but the %d key reuses", rep.Accepted, ok, rep.Attempted, by["key_reuse"])
	}
	if got := rep.Refused["409 key-reused"]; got != by["key_reuse"] || len(rep.Refused) != 1 {
		t.Errorf("refused %v; want only 409 key-reused, %d times", rep.Refused, by["key_reuse"])
	}
	if rep.Recorded != ok["first_response"] {
		t.Errorf("recorded %d; want one per accepted first response, %d", rep.Recorded, ok["first_response"])
	}
	if got := rep.Rejected["already_responded"]; got != ok["second_response"] || len(rep.Rejected) != 1 {
		t.Errorf("rejected %v; want already_responded for each of the %d second responses", rep.Rejected, ok["second_response"])
	}
	if rep.DuplicatesAbsorbed != ok["exact_retry"] {
		t.Errorf("duplicates absorbed %d; want one per exact retry, %d", rep.DuplicatesAbsorbed, ok["exact_retry"])
	}
	if rep.AcceptedEvents != ok["first_response"]+ok["second_response"] || rep.Uncertain != 0 {
		t.Errorf("accepted events %d, uncertain %d; want %d and 0", rep.AcceptedEvents, rep.Uncertain, ok["first_response"]+ok["second_response"])
	}
	if want := int((by["first_response"] + 49) / 50); rep.Polls < want {
		t.Errorf("%d polls for %d first responses of 50 principals; want at least %d", rep.Polls, by["first_response"], want)
	}
	if rep.AcceptLatency.Count != rep.Accepted || rep.AcceptLatency.P50 <= 0 || rep.AcceptLatency.P99 < rep.AcceptLatency.P50 {
		t.Errorf("accept latency %+v", rep.AcceptLatency)
	}
	if rep.RecordLatency.Count != rep.Recorded || rep.RecordLatency.P99 < rep.RecordLatency.P50 {
		t.Errorf("accept-to-recorded latency %+v", rep.RecordLatency)
	}
	if !rep.Drained || rep.Throughput <= 0 {
		t.Errorf("drained %v, throughput %v", rep.Drained, rep.Throughput)
	}
	// The tallies of the polls add up to the recorded events.
	var total int64
	for r := range rep.Polls {
		res, err := p.store.Results(context.Background(), fmt.Sprintf("%s-%d", rep.PollPrefix, r))
		if err != nil {
			t.Fatal(err)
		}
		total += res.Total
	}
	if total != rep.Recorded {
		t.Errorf("the polls' tallies sum to %d; want %d", total, rep.Recorded)
	}
	// Close closed the polls and revoked the tokens.
	poll, err := p.store.Poll(context.Background(), rep.PollPrefix+"-0")
	if err != nil || poll.OpenAt(time.Now()) {
		t.Errorf("poll %s-0 is still open after the run (err %v)", rep.PollPrefix, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) == 0 {
		t.Errorf("no progress was reported")
	}
}

// The verification fails when the ledger holds what the ground truth does
// not: an extra row (counted twice), a tampered projection (rebuild
// differs), or nothing at all of what was accepted (lost).
func TestVerificationFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := func(url string) loadtest.Config {
		return loadtest.Config{
			Targets: []string{url}, Votes: 300, Concurrency: 8, Principals: 20,
			RetryShare: 0.1, KeyReuseShare: 0.05, SecondResponseShare: 0.1,
			DrainTimeout: 20 * time.Second, Logger: testLogger(t),
		}
	}

	t.Run("tampered", func(t *testing.T) {
		t.Parallel()
		p := setup(t, true)
		s, err := loadtest.New(cfg(p.url), p.deps())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		if err := s.Send(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		rep, err := s.Verify(ctx)
		if err != nil || !rep.Passed() {
			t.Fatalf("before tampering: err %v, failures %v", err, rep.Failures())
		}
		poll := s.PollPrefix() + "-0"

		// A vote behind the loadtest's back, through the ledger: the
		// ledger and the projection agree, but the ground truth does not.
		out, err := p.store.Append(ctx, []ledger.Event{{PrincipalID: "intruder", ClientEventID: "x1", PollID: poll, CandidateID: "c1", ReceivedAt: time.Now()}})
		if err != nil || out[0].Status != ledger.StatusRecorded {
			t.Fatalf("append: %v %v", out, err)
		}
		rep, err = s.Verify(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Passed() || rep.CountedTwice != 1 || !contains(rep.Failures(), "counted twice") || !contains(rep.Failures(), "tallies differ") {
			t.Errorf("after an extra ledger row: counted twice %d, failures %q", rep.CountedTwice, rep.Failures())
		}
		if contains(rep.Failures(), "rebuild differs") {
			t.Errorf("rebuild differs, but only the ledger and the projection together were changed: %q", rep.Failures())
		}

		// The projection changed without the ledger.
		if _, err := p.db.Pool.Exec(ctx, `UPDATE poll_results SET vote_count = vote_count + 2 WHERE poll_id = $1 AND candidate_id = 'c2'`, poll); err != nil {
			t.Fatal(err)
		}
		rep, err = s.Verify(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Passed() || !contains(rep.Failures(), "rebuild differs from the projection in 1 rows") {
			t.Errorf("after tampering with the projection: failures %q", rep.Failures())
		}
	})

	// Without a projector, sequentially on one pipeline.
	t.Run("without projector", func(t *testing.T) {
		t.Parallel()
		p := setup(t, false)

		// Nothing applies the queue and the verification does not wait for
		// it: every accepted vote is missing from the ledger.
		deps := p.deps()
		deps.Queue = nil
		rep, err := loadtest.Run(ctx, cfg(p.url), deps)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Passed() || rep.Lost != rep.AcceptedEvents || rep.Lost == 0 || !contains(rep.Failures(), "lost: answered 202") {
			t.Errorf("lost %d of %d accepted events; failures %q", rep.Lost, rep.AcceptedEvents, rep.Failures())
		}

		// The queue does not drain in time.
		c := cfg(p.url)
		c.Votes = 50
		c.DrainTimeout = 300 * time.Millisecond
		rep, err = loadtest.Run(ctx, c, p.deps())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Passed() || rep.Drained || !contains(rep.Failures(), "did not drain") {
			t.Errorf("drained %v; failures %q", rep.Drained, rep.Failures())
		}
		if err := p.rdb.Del(ctx, p.keys.Stream(0)).Err(); err != nil {
			t.Fatal(err)
		}

		// When the ledger sees a principal's second response before the
		// first (a projector claimed the first late), the strict
		// verification says so, and AllowReorder accepts it as long as
		// nothing is lost or counted twice.
		for _, allow := range []bool{false, true} {
			rep := reversedRun(t, p, allow)
			if rep.Reordered == 0 || rep.Lost != 0 || rep.CountedTwice != 0 {
				t.Fatalf("allow reorder %v: reordered %d, lost %d, counted twice %d; want some, 0, 0", allow, rep.Reordered, rep.Lost, rep.CountedTwice)
			}
			if allow && !rep.Passed() {
				t.Errorf("with AllowReorder: failures %q", rep.Failures())
			}
			if !allow && (rep.Passed() || !contains(rep.Failures(), "reordered") || !contains(rep.Failures(), "tallies differ")) {
				t.Errorf("without AllowReorder: failures %q", rep.Failures())
			}
		}
	})
}

func contains(fs []string, sub string) bool {
	for _, f := range fs {
		if strings.Contains(f, sub) {
			return true
		}
	}
	return false
}

// reversedRun sends votes to an intake without a projector, then applies
// the queue to the ledger in reverse order, as one batch.
func reversedRun(t *testing.T, p *pipeline, allowReorder bool) loadtest.Report {
	ctx := context.Background()
	s, err := loadtest.New(loadtest.Config{
		Targets: []string{p.url}, Votes: 200, Concurrency: 4, Principals: 20,
		SecondResponseShare: 0.3, AllowReorder: allowReorder, DrainTimeout: 5 * time.Second, Logger: testLogger(t),
	}, p.deps())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if err := s.Send(ctx); err != nil {
		t.Fatal(err)
	}
	xs, err := p.rdb.XRange(ctx, p.keys.Stream(0), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	events := make([]ledger.Event, 0, len(xs))
	for i := len(xs) - 1; i >= 0; i-- {
		e, err := stream.Decode(xs[i].Values)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ledger.Event{PrincipalID: e.PrincipalID, ClientEventID: e.ClientEventID,
			PollID: e.PollID, CandidateID: e.CandidateID, ReceivedAt: e.ReceivedAt})
	}
	if _, err := p.store.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	if err := p.rdb.Del(ctx, p.keys.Stream(0)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// The tally loadtest command prints the report and exits 0 when the run
// verified, 1 when a check failed, 2 on bad flags.
func TestCommand(t *testing.T) {
	t.Parallel()
	p := setup(t, true)
	run := func(p *pipeline, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		full := append([]string{"tally", "loadtest", "--target", p.url, "--database-url", p.db.URL, "--credential-key", p.keyFile,
			"--redis-url", testenv.RedisURL(), "--log-format", "text", "--log-level", "error"}, args...)
		code := cli.Run(context.Background(), full, strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := run(p, "--stream-prefix", p.keys.Prefix(), "--votes", "300", "--principals", "30",
		"--retry-share", "0.1", "--key-reuse-share", "0.1", "--second-response-share", "0.1")
	if code != 0 || !regexp.MustCompile(`(?m)^lost\s+0$`).MatchString(out) || !regexp.MustCompile(`(?m)^counted twice\s+0$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^result\s+PASS$`).MatchString(out) || !strings.Contains(errOut, "loadtest: polls lt-") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	// Without a projector the queue does not drain, and what was accepted
	// is not in the ledger.
	q := setup(t, false)
	code, out, errOut = run(q, "--stream-prefix", q.keys.Prefix(), "--votes", "100", "--principals", "10",
		"--drain-timeout", "200ms", "--format", "json", "--quiet")
	var rep struct {
		Lost     int64    `json:"lost"`
		Failures []string `json:"failures"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("exit %d, stdout %q: %v", code, out, err)
	}
	if code != 1 || rep.Lost == 0 || len(rep.Failures) < 2 || !strings.Contains(rep.Failures[0], "did not drain") || errOut != "" {
		t.Errorf("exit %d, lost %d, failures %q, stderr %q; want exit 1, undrained, lost votes", code, rep.Lost, rep.Failures, errOut)
	}

	if code, _, errOut = run(p, "--votes", "10", "--duration", "1s"); code != 2 || !strings.Contains(errOut, "not both") {
		t.Errorf("--votes with --duration: exit %d, stderr %q", code, errOut)
	}
}
