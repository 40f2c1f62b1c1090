package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	ucli "github.com/urfave/cli/v2"

	"tally/internal/testenv"
	"tally/ledger"
)

// TestImportWorkersKeepOutcomes: a file full of conflicts (second answers,
// reused keys, exact repeats, invalid choices) imported with several
// workers gives the outcomes and the ledger of one worker. (Its
// event ids are of one poll each: one id in two polls is the one case
// where workers may differ, see importEvents.)
func TestImportWorkersKeepOutcomes(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for i := 0; i < 3000; i++ {
		poll := rng.IntN(2)
		fmt.Fprintf(&b, `{"event_id":"k%d-%d","poll_id":"p%d","candidate_id":"%s","principal_id":"u%d"}`+"\n",
			rng.IntN(4), poll, poll, []string{"a", "b", "c", "zz"}[rng.IntN(4)], rng.IntN(300))
	}
	file := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	type state struct {
		Counts     map[string]int
		Ledger     []string
		Rejections []string
	}
	load := func(workers int) state {
		db := testenv.Postgres(t)
		for _, p := range []string{"p0", "p1"} {
			if r := tally(t, db.URL, "poll", "create", p, "--title", p, "--choice", "a", "--choice", "b", "--choice", "c"); r.code != 0 {
				t.Fatalf("poll create: %+v", r)
			}
		}
		r := tally(t, db.URL, "import", file, "--format", "json", "--batch-size", "50", "--workers", fmt.Sprint(workers))
		var out struct{ Outcomes map[string]int }
		if err := json.Unmarshal([]byte(r.stdout), &out); r.code != 0 || err != nil {
			t.Fatalf("import --workers %d: %+v (%v)", workers, r, err)
		}
		rows := func(sql string) []string {
			rs, err := db.Pool.Query(context.Background(), sql)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rs, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		return state{out.Outcomes,
			rows(`SELECT concat_ws(' ', principal_id, client_event_id, poll_id, candidate_id) FROM poll_events ORDER BY 1`),
			rows(`SELECT concat_ws(' ', principal_id, client_event_id, poll_id, candidate_id, reason) FROM poll_event_rejections ORDER BY 1`)}
	}
	one, three := load(1), load(3)
	if one.Counts["recorded"] == 0 || one.Counts["rejected: already_responded"] == 0 || one.Counts["rejected: key_reused"] == 0 ||
		one.Counts["duplicate"] == 0 || one.Counts["rejected: invalid_choice"] == 0 {
		t.Fatalf("the file should provoke every kind of conflict; outcomes %v", one.Counts)
	}
	if !reflect.DeepEqual(one, three) {
		t.Fatalf("three workers differ from one:\none:   %v\nthree: %v", one.Counts, three.Counts)
	}
}

// TestWorkersSizeThePool: a command with --workers gets a pool of at least
// one connection per worker and one more, unless the URL sets its own.
func TestWorkersSizeThePool(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	for _, tc := range []struct {
		url  string
		want int32
	}{
		{db.URL, 9},
		{db.URL + map[bool]string{true: "&", false: "?"}[strings.Contains(db.URL, "?")] + "pool_max_conns=3", 3},
	} {
		var got int32
		app := &ucli.App{Flags: []ucli.Flag{&ucli.StringFlag{Name: flagDatabaseURL.Name}, &ucli.IntFlag{Name: "workers"}},
			Action: func(c *ucli.Context) error {
				pool, err := openPool(c)
				if err != nil {
					return err
				}
				defer pool.Close()
				got = pool.Config().MaxConns
				return nil
			}}
		runMu.Lock() // urfave/cli's global help flag
		err := app.Run([]string{"x", "--" + flagDatabaseURL.Name, tc.url, "--workers", "8"})
		runMu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s with --workers 8: pool of %d, want %d", tc.url, got, tc.want)
		}
	}
}

// TestImportStopsWaitingOnCancel: while the ledger fails with a transient
// error, a cancelled import stops waiting to retry at once (Ctrl-C does
// not sit out the backoff).
func TestImportStopsWaitingOnCancel(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	imp := newImporter(ctx, store, 10, 1)
	batch := []ledger.Event{{PrincipalID: "u1", ClientEventID: "k1", PollID: "p", CandidateID: "a", ReceivedAt: time.Now()}}
	// Cancelled during the second wait, which runs from 200ms to 600ms.
	time.AfterFunc(250*time.Millisecond, cancel)
	start := time.Now()
	_, err = imp.append(batch)
	if took := time.Since(start); err == nil || took > 500*time.Millisecond {
		t.Errorf("append on a refused connection, cancelled after 250ms: error %v after %s; want an error at once, not at the end of the wait", err, took)
	}
	cancel()
	if err := imp.close(); err != nil {
		t.Fatal(err)
	}
}
