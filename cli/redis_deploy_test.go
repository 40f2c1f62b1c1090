package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/projector"
	"tally/stream"
)

// TestRedisClusterEndToEnd runs tally intake, tally status and tally
// projector with --redis-mode cluster on a private Redis Cluster of 3
// masters with a replica each, 6 stream shards spread over the masters,
// and --redis-wait-replicas 1: every vote is confirmed by a replica,
// waits on its shard, and is recorded exactly once.
func TestRedisClusterEndToEnd(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisCluster(t, 3, 1)
	redisArgs := []string{"--redis-mode", "cluster", "--redis-url", cluster.URL(), "--shards", "6"}
	masters := map[string]bool{}
	for shard := range 6 {
		masters[cluster.MasterOf("{tally:"+strconv.Itoa(shard)+"}:events")] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the 6 shards are on %d masters, want 3", len(masters))
	}
	runDeployment(t, redisArgs, []string{"--redis-wait-replicas", "1"})
}

// TestRedisSentinelEndToEnd runs tally intake, tally status and tally
// projector with --redis-mode sentinel on a private master, replica and
// three sentinels, with --redis-wait-replicas 1.
func TestRedisSentinelEndToEnd(t *testing.T) {
	t.Parallel()
	set := testenv.StartRedisSentinel(t, 3)
	redisArgs := []string{"--redis-mode", "sentinel", "--redis-url", set.URL(), "--shards", "2"}
	runDeployment(t, redisArgs, []string{"--redis-wait-replicas", "1"})
}

// runDeployment casts votes through tally intake run with redisArgs
// (--redis-mode MODE --redis-url URL --shards N, in that order) and
// intakeArgs, reads the backlog with tally status, applies it with tally
// projector, and checks that every vote is recorded once and the queue is
// empty. Each shard must have held votes.
func runDeployment(t *testing.T, redisArgs, intakeArgs []string) {
	t.Helper()
	const principals = 60
	db := testenv.Postgres(t)
	ctx := context.Background()
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "lunch", Title: "Lunch?", OpensAt: time.Unix(0, 0), Choices: []string{"pizza", "sushi"}}); err != nil {
		t.Fatal(err)
	}
	keyFile := credentialKeyFile(t)
	tokens := make([]string, principals)
	for i := range tokens {
		_, tokens[i] = signedToken(t, store, keyFile, fmt.Sprintf("voter-%d", i))
	}
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	// The daemons and tally status log in as a role granted tally_daemon.
	common := append([]string{"--database-url", testenv.DaemonLogin(t, db), "--log-format", "json"}, redisArgs...)

	// intake: every vote 202, and each retry of one (same event_id) too.
	stopIntake := startDaemon(t, append(append([]string{"intake", "--listen", addr, "--credential-key", keyFile}, common...), intakeArgs...))
	client := apiClient(t)
	testenv.Eventually(t, 15*time.Second, "intake to be ready", func() error {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	vote := func(token, choice string) (int, string) {
		body := `{"event_id":"e1","poll_id":"lunch","candidate_id":"` + choice + `"}`
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/votes", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(text)
	}
	// Eight voters at a time: intake looks up only so many tokens it has
	// not verified yet from one address at once (--auth-failure-burst);
	// more would wait their turn.
	var wg sync.WaitGroup
	errs := make(chan string, 2*principals)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				choice := []string{"pizza", "sushi"}[i%2]
				for range 2 {
					if code, body := vote(tokens[i], choice); code != http.StatusAccepted {
						errs <- fmt.Sprintf("voter-%d: %d %s", i, code, body)
					}
				}
			}
		})
	}
	for i := range tokens {
		next <- i
	}
	close(next)
	testenv.WaitGroup(t, &wg, 2*time.Minute, "the voters' requests")
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if t.Failed() {
		stopIntake()
		t.FailNow()
	}
	stopIntake()

	// tally status sees the backlog on every shard.
	st := status(t, common)
	if st.Total.Backlog != principals {
		t.Fatalf("status: backlog %d, want %d (one entry per vote, none per retry)", st.Total.Backlog, principals)
	}
	for _, sh := range st.Shards {
		if sh.Backlog == 0 {
			t.Fatalf("status: shard %d holds no vote: %+v", sh.Shard, st.Shards)
		}
	}

	// tally projector applies it.
	stopProjector := startDaemon(t, append([]string{"projector", "--batch-wait", "10ms", "--consumer", "deploy-test"}, common...))
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("the ledger to hold the %d votes", principals), func() error {
		res, err := store.Results(ctx, "lunch")
		if err == nil && res.Total != principals {
			err = fmt.Errorf("%d votes", res.Total)
		}
		return err
	})
	// tally status waits for the projector (runMu): read as it does.
	rdb, err := newRedisClient(redisArgs[1], redisArgs[3])
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	keys, err := stream.NewKeys("", len(st.Shards))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the queue to be empty once the votes were recorded", func() error {
		q, err := projector.Inspect(ctx, rdb, keys)
		if err == nil && (q.Total.Backlog != 0 || q.Total.Pending != 0) {
			err = fmt.Errorf("%+v", q.Total)
		}
		return err
	})
	stopProjector()
	st = status(t, common)
	var rows, distinct int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT principal_id) FROM poll_events`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != principals || distinct != principals {
		t.Errorf("ledger: %d rows of %d principals, want one row for each of %d", rows, distinct, principals)
	}
	for _, sh := range st.Shards {
		if !sh.GroupExists || sh.DeadLetters != 0 {
			t.Errorf("shard %d after the run: %+v", sh.Shard, sh)
		}
	}
	if r := tallyWith(t, append([]string{"deadletter", "list"}, common...)...); r.code != 0 {
		t.Errorf("deadletter list: %+v", r)
	}
}

// deployStatus is what runDeployment reads of tally status --format json.
type deployStatus struct {
	Shards []struct {
		Shard       int   `json:"shard"`
		Backlog     int64 `json:"backlog"`
		Pending     int64 `json:"pending"`
		DeadLetters int64 `json:"dead_letters"`
		GroupExists bool  `json:"group_exists"`
	} `json:"shards"`
	Total struct {
		Backlog int64 `json:"backlog"`
		Pending int64 `json:"pending"`
	} `json:"total"`
}

func status(t *testing.T, common []string) deployStatus {
	t.Helper()
	r := tallyWith(t, append([]string{"status", "--format", "json"}, common...)...)
	var st deployStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil {
		t.Fatalf("status: %+v (%v)", r, err)
	}
	return st
}

// startDaemon runs the tally command line args until the returned stop is
// called, which ends it the way SIGTERM does and fails t unless it exits 0
// within 15s. It holds runMu meanwhile, as a real process runs one
// command.
func startDaemon(t *testing.T, args []string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	exited, errOut := runBackground(ctx, args...)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case code := <-exited:
				if code != 0 {
					t.Errorf("tally %s exited %d:\n%s", args[0], code, errOut.String())
				}
			case <-time.After(15 * time.Second):
				t.Errorf("tally %s did not stop within 15s of its context ending", args[0])
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
