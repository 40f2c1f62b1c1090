package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/internal/testenv"
	"tally/ledger"
)

type bundle struct {
	db    testenv.DB
	store *ledger.Store
	ctx   context.Context
}

func setup(t *testing.T) bundle {
	t.Helper()
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{db: db, store: store, ctx: context.Background()}
}

// ownStore is a store on a pool of its own on b's database (storeOn).
func (b bundle) ownStore(t *testing.T, set func(*pgxpool.Config)) (*ledger.Store, *pgxpool.Pool) {
	t.Helper()
	return storeOn(t, b.db.URL, set)
}

// storeOn is a store on a pool of its own at url, the pool's config set
// by set when not nil (its connections, how they read, its session's
// settings), closed when t ends.
func storeOn(t *testing.T, url string, set func(*pgxpool.Config)) (*ledger.Store, *pgxpool.Pool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return store, pool
}

// bothWays runs fn in two parallel subtests, each on a bundle of its own:
// as the store is, and with hook (a test hook of package ledger) set on
// it. name names the hook.
func bothWays(t *testing.T, name string, hook func(*ledger.Store), fn func(*testing.T, bundle)) {
	for _, set := range []bool{false, true} {
		t.Run(fmt.Sprintf("%s %v", name, set), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if set {
				hook(b.store)
			}
			fn(t, b)
		})
	}
}

func (b bundle) poll(t *testing.T, id string, choices ...string) {
	t.Helper()
	if err := b.store.CreatePoll(b.ctx, ledger.Poll{ID: id, Title: "poll " + id, OpensAt: time.Unix(0, 0), Choices: choices}); err != nil {
		t.Fatalf("create poll %s: %v", id, err)
	}
}

func ev(principal, key, poll, cand string) ledger.Event {
	return ledger.Event{PrincipalID: principal, ClientEventID: key, PollID: poll, CandidateID: cand, ReceivedAt: time.Now()}
}

func TestAppendOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "lunch", "pizza", "sushi")
	batch := []ledger.Event{
		ev("alice", "k1", "lunch", "pizza"),
		ev("bob", "k1", "lunch", "sushi"),
		ev("alice", "k1", "lunch", "pizza"),  // exact repeat in batch
		ev("alice", "k1", "lunch", "sushi"),  // key reused
		ev("alice", "k2", "lunch", "sushi"),  // second response
		ev("carol", "k1", "lunch", "tacos"),  // invalid choice
		ev("carol", "k2", "nopoll", "pizza"), // unknown poll
		ev("carol", "k3", "lunch", "sushi"),  // recorded after an invalid one
	}
	got, err := b.store.Append(b.ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"recorded", "recorded", "duplicate", "rejected: key_reused", "rejected: already_responded",
		"rejected: invalid_choice", "rejected: unknown_poll", "recorded"}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("event %d: got %s, want %s", i, got[i], want[i])
		}
	}
	if got[2].Seq != got[0].Seq || got[0].Seq == 0 {
		t.Errorf("in-batch duplicate has seq %d, want %d", got[2].Seq, got[0].Seq)
	}
	// The retry after an uncertain commit.
	again, err := b.store.Append(b.ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want2 := []string{"duplicate", "duplicate", "duplicate", "rejected: key_reused", "rejected: already_responded",
		"rejected: invalid_choice", "rejected: unknown_poll", "duplicate"}
	for i := range want2 {
		if again[i].String() != want2[i] {
			t.Errorf("retry event %d: got %s, want %s", i, again[i], want2[i])
		}
	}
	res, err := b.store.Results(b.ctx, "lunch")
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 3 || res.Results[0].Votes != 1 || res.Results[1].Votes != 2 {
		t.Errorf("results %+v, want pizza 1 sushi 2", res)
	}
	rep, err := b.store.Rebuild(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differing != 0 || rep.LedgerEvents != 3 {
		t.Errorf("rebuild %+v", rep)
	}
}

// TestAppendNewEventsBesideLedgerRows: a batch of new events with a
// redelivered one and a second response among them. The optimistic insert
// meets the ledger's unique indexes, rolls back to its savepoint and runs
// again without them; the new events are recorded once, in the ledger, the
// projection and the log, and nothing else changes.
func TestAppendNewEventsBesideLedgerRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "lunch", "pizza", "sushi")
	first, err := b.store.Append(b.ctx, []ledger.Event{ev("alice", "k1", "lunch", "pizza"), ev("bob", "k1", "lunch", "sushi")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.store.Append(b.ctx, []ledger.Event{
		ev("carol", "k1", "lunch", "sushi"),
		ev("alice", "k1", "lunch", "pizza"), // redelivered
		ev("dave", "k1", "lunch", "pizza"),
		ev("bob", "k2", "lunch", "pizza"), // second response
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"recorded", "duplicate", "recorded", "rejected: already_responded"}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("event %d: got %s, want %s", i, got[i], want[i])
		}
	}
	if got[1].Seq != first[0].Seq {
		t.Errorf("redelivered event has seq %d, want %d", got[1].Seq, first[0].Seq)
	}
	res, err := b.store.Results(b.ctx, "lunch")
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 4 || res.Results[0].Votes != 2 || res.Results[1].Votes != 2 {
		t.Errorf("results %+v, want pizza 2 sushi 2", res)
	}
	rep, err := b.store.Rebuild(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differing != 0 || rep.LedgerEvents != 4 {
		t.Errorf("rebuild %+v, want 4 events and no difference", rep)
	}
}

func TestErrorsAreClassified(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Append(b.ctx, []ledger.Event{{PrincipalID: "u", ClientEventID: "bad id", PollID: "p", CandidateID: "c", ReceivedAt: time.Now()}})
	var inv *ledger.InvalidEventError
	if !errors.As(err, &inv) || inv.Field != "event_id" || !errors.Is(err, ledger.ErrInvalid) || ledger.IsRetryable(err) {
		t.Errorf("invalid event: %v", err)
	}
	big := make([]ledger.Event, b.store.MaxBatch()+1)
	if _, err := b.store.Append(b.ctx, big); !errors.Is(err, ledger.ErrBatchTooLarge) {
		t.Errorf("oversized batch: %v", err)
	}
	if _, err := b.store.Poll(b.ctx, "nope"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("unknown poll: %v", err)
	}
	// A server that is not there is transient.
	pool, err := pgxpool.New(b.ctx, "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	down, _ := ledger.New(pool, ledger.Config{})
	if _, err := down.Append(b.ctx, []ledger.Event{ev("u", "k", "p", "c")}); !ledger.IsRetryable(err) {
		t.Errorf("unreachable server: %v is not retryable", err)
	}
}
