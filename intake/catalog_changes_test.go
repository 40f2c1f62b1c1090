package intake_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"tally/credential"
	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// quietPoll inserts poll id (one choice, a) behind the triggers' back: no
// change is logged and nothing is notified, so only a whole load of the
// catalog can learn of it, or a change written by hand (logged).
func quietPoll(t *testing.T, db testenv.DB, id string, logged bool) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	stmts := []string{
		`SET LOCAL session_replication_role = replica`,
		`INSERT INTO polls (id, title) VALUES ('` + id + `', 'Quiet')`,
		`INSERT INTO poll_choices (poll_id, candidate_id, position) VALUES ('` + id + `', 'a', 1)`,
	}
	if logged {
		stmts = append(stmts, `INSERT INTO catalog_changes (kind, target) VALUES ('poll', '`+id+`')`)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCatalogAppliesOnlyChanges: after its load at start, intake applies
// the changes of the catalog's log and reads nothing else: a poll created
// is taken, one slipped in without a change is not (a whole reload would
// take it). An admin write holds at the intake that answered it before its
// answer, by its change alone; a write that changed nothing (a close of a
// closed poll) applies nothing.
func TestCatalogAppliesOnlyChanges(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.CatalogRefresh = time.Hour })
	loads := func() float64 { return testutil.ToFloat64(b.m.CatalogLoads) }
	applied := func() float64 { return testutil.ToFloat64(b.m.CatalogChanges) }
	if loads() != 1 {
		t.Fatalf("%v whole loads after the start, want 1", loads())
	}
	quietPoll(t, b.db, "quiet", false)
	b.poll(t, ledger.Poll{ID: "p2", Title: "Next", Choices: []string{"x"}})
	if b.srv.CatalogHolds("quiet") {
		t.Fatal("intake reloaded the whole catalog for the change of one poll")
	}

	_, admin := b.admin(t, "app")
	if r := b.adminDo(t, http.MethodPost, "/v1/polls/p2/close", admin, ""); r.code != http.StatusOK {
		t.Fatalf("close: %d %s", r.code, r.raw)
	}
	if r := b.vote(t, b.token, "late", "p2", "x"); r.code != http.StatusUnprocessableEntity {
		t.Fatalf("a vote on the poll this intake just closed: %d %s, want 422", r.code, r.raw)
	}
	before := applied()
	if r := b.adminDo(t, http.MethodPost, "/v1/polls/p2/close", admin, ""); r.code != http.StatusOK {
		t.Fatalf("close again: %d %s", r.code, r.raw)
	}
	// A poll created after it logs changes of its own that intake applies
	// after any the close logged: once they are applied, so would the
	// close's be.
	b.poll(t, ledger.Poll{ID: "marker", Title: "After", Choices: []string{"x"}})
	var marker float64
	if err := b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM catalog_changes WHERE kind = 'poll' AND target = 'marker'`).Scan(&marker); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "intake to apply the changes of the poll created after the close", func() bool {
		return applied() >= before+marker
	})
	if got := applied() - before - marker; got != 0 {
		t.Fatalf("a close of a closed poll applied %v changes, want none", got)
	}
	if loads() != 1 || b.srv.CatalogHolds("quiet") {
		t.Fatalf("%v whole loads, want 1", loads())
	}
}

// TestCatalogPeriodicCheck: a change whose NOTIFY never came is applied by
// the periodic check of the log.
func TestCatalogPeriodicCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.CatalogRefresh = 100 * time.Millisecond })
	quietPoll(t, b.db, "quiet", true)
	b.waitCatalog(t, "quiet")
}

// TestCatalogFellBehindTrimmedLog: an intake whose last change applied was
// trimmed from the log loads the catalog whole again.
func TestCatalogFellBehindTrimmedLog(t *testing.T) {
	t.Parallel()
	db, store, srv := unservedIntake(t, intake.Config{})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	ctx := context.Background()
	if err := srv.Reload(ctx); err != nil { // what Serve loads at start
		t.Fatal(err)
	}
	quietPoll(t, db, "quiet", false)
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "p2", Title: "Next", Choices: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if err := store.TrimCatalogChanges(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if !srv.CatalogHolds("p2") || !srv.CatalogHolds("quiet") {
		t.Fatalf("after the log was trimmed past it, intake holds p2: %v, quiet: %v; want a whole load with both",
			srv.CatalogHolds("p2"), srv.CatalogHolds("quiet"))
	}
	if got := testutil.ToFloat64(srv.Metrics().CatalogLoads); got != 2 {
		t.Fatalf("%v whole loads, want 2", got)
	}
}

// TestCatalogAppliesPagesOfChanges: changes made while intake did not
// look are applied from the polls read with them, page after page: a
// poll created and closed in one page is held closed, a poll gone from
// the database is dropped, a principal revoked is refused, a thousand
// polls more than a page are all held, and all without a whole load. A
// change missed (a poll slipped in without one) is then caught only by
// the whole load the trimmed log forces.
func TestCatalogAppliesPagesOfChanges(t *testing.T) {
	t.Parallel()
	db, store, srv := unservedIntake(t, intake.Config{})
	ctx := context.Background()
	quietPoll(t, db, "gone", false)
	if err := srv.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if !srv.CatalogHolds("gone") {
		t.Fatal("the load at start did not read poll gone")
	}
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "p1", Title: "T", Choices: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if err := store.ClosePoll(ctx, "p1", time.Now()); err != nil {
		t.Fatal(err)
	}
	ps, err := store.AddPrincipals(ctx, []string{"v"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.RevokePrincipal(ctx, ps[0].ID); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`DELETE FROM poll_choices WHERE poll_id = 'gone'`, `DELETE FROM polls WHERE id = 'gone'`} {
		if _, err := db.Pool.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	fillPolls(t, store, 1001) // c0 to c1000, a change each: two pages
	if err := srv.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if p, ok := srv.CatalogPoll("p1"); !ok || p.ClosesAt == nil {
		t.Fatalf("poll p1 created and closed: held %v, %+v; want it closed", ok, p)
	}
	if srv.CatalogHolds("gone") || !srv.Revoked(ps[0].ID) || !srv.CatalogHolds("c0") || !srv.CatalogHolds("c1000") {
		t.Fatalf("holds gone %v (want false), principal revoked %v, c0 %v, c1000 %v (want true)",
			srv.CatalogHolds("gone"), srv.Revoked(ps[0].ID), srv.CatalogHolds("c0"), srv.CatalogHolds("c1000"))
	}
	if got := testutil.ToFloat64(srv.Metrics().CatalogLoads); got != 1 {
		t.Fatalf("%v whole loads, want 1", got)
	}

	quietPoll(t, db, "missed", false)
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "p2", Title: "T", Choices: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if err := store.TrimCatalogChanges(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if !srv.CatalogHolds("missed") || !srv.CatalogHolds("p2") || testutil.ToFloat64(srv.Metrics().CatalogLoads) != 2 {
		t.Fatalf("after the log was trimmed: holds missed %v, p2 %v, %v whole loads; want both held by a second load",
			srv.CatalogHolds("missed"), srv.CatalogHolds("p2"), testutil.ToFloat64(srv.Metrics().CatalogLoads))
	}
}

// TestCatalogLogRewound: an intake that applied changes the log no longer
// holds, its seqs begun again (the database restored from a backup), loads
// the catalog whole again rather than skip the new changes.
func TestCatalogLogRewound(t *testing.T) {
	t.Parallel()
	db, store, srv := unservedIntake(t, intake.Config{})
	ctx := context.Background()
	for _, id := range []string{"p1", "p2", "p3"} {
		if err := store.CreatePoll(ctx, ledger.Poll{ID: id, Title: "T", Choices: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`DELETE FROM catalog_changes`, `ALTER TABLE catalog_changes ALTER COLUMN seq RESTART WITH 1`} {
		if _, err := db.Pool.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	quietPoll(t, db, "quiet", true) // seq 1, below the 3 applied
	if err := srv.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if !srv.CatalogHolds("quiet") {
		t.Fatal("a change made after the log went back was skipped")
	}
	if got := testutil.ToFloat64(srv.Metrics().CatalogLoads); got != 2 {
		t.Fatalf("%v whole loads, want 2", got)
	}
}

// TestSlowCatalogReadIsNoOutage: while intake's reads of the catalog's log
// time out (a lock holds them), admin writes still commit and answer, and
// intake does not take PostgreSQL for down; once the lock goes, the
// changes are applied.
func TestSlowCatalogReadIsNoOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.PostgresTimeout = 300 * time.Millisecond; c.CatalogRefresh = time.Hour })
	_, admin := b.admin(t, "app")
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE catalog_changes_trimmed IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, `{"poll_id":"`+id+`","title":"New","choices":["y"]}`)
		if r.code != http.StatusCreated {
			t.Fatalf("create %s while the catalog's reads time out: %d %s, want 201", id, r.code, r.raw)
		}
	}
	if got := testutil.ToFloat64(b.m.PostgresReachable); got != 1 {
		t.Fatalf("postgres_reachable %v after slow catalog reads, want 1", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		b.waitCatalog(t, id)
	}
}

// TestCatalogLoadAtStartSaysHowFar: a first load that does not end within
// Config.CatalogLoadTimeout says how many polls it read, intake serves
// not ready meanwhile, and the load goes on from there to the end, in
// pages, with no second whole load.
func TestCatalogLoadAtStartSaysHowFar(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	// 2,500 polls: more than two pages.
	for _, s := range []string{
		`INSERT INTO polls (id, title) SELECT 'q' || i, 'Poll' FROM generate_series(1, 2500) i`,
		`INSERT INTO poll_choices (poll_id, candidate_id, position) SELECT 'q' || i, 'a', 1 FROM generate_series(1, 2500) i`,
	} {
		if _, err := db.Pool.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// The revocations, read after the polls, wait for this lock.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE credential_key_retirements IN ACCESS EXCLUSIVE MODE`); err != nil {
		tx.Rollback(ctx)
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(1500 * time.Millisecond)
		tx.Rollback(ctx)
	}()
	t.Cleanup(func() { <-released })
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	var logs testenv.LogBuffer
	b := setup(t, withStore(store), withRedis(rdb, prefix), withLogger(slog.New(slog.NewTextHandler(&logs, nil))), func(c *config) {
		c.CatalogLoadTimeout = 300 * time.Millisecond
	})
	b.db = db
	// 2,500 or 2,501 (the fixture's p1), or fewer on a machine so busy
	// that the pages took longer than the bound.
	if !strings.Contains(logs.String(), "the catalog is not loaded yet") || !regexp.MustCompile(`polls_read=\d+ `).MatchString(logs.String()) {
		t.Fatalf("the log does not say how far the first load got:\n%s", logs.String())
	}
	b.waitCatalog(t, "q2500")
	if r := b.readyz(t); r.code != http.StatusOK {
		t.Fatalf("readyz %d %s after the load", r.code, r.raw)
	}
	if got := testutil.ToFloat64(b.m.CatalogLoads); got != 1 {
		t.Fatalf("%v whole loads, want 1 (the load at start, gone on)", got)
	}
}

// TestCatalogLoadsLongEligibilityLists: a catalog whose pages of polls
// take longer than Config.PostgresTimeout to read (long eligibility
// lists) still loads, in smaller pages, and intake becomes ready.
func TestCatalogLoadsLongEligibilityLists(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	ctx := context.Background()
	for _, s := range []string{
		`INSERT INTO polls (id, title, eligibility) SELECT 'big' || i, 'Big', 'list' FROM generate_series(1, 100) i`,
		`INSERT INTO poll_choices (poll_id, candidate_id, position) SELECT 'big' || i, 'a', 1 FROM generate_series(1, 100) i`,
		`INSERT INTO poll_eligible (poll_id, principal_id) SELECT 'big' || i, 'p-' || j FROM generate_series(1, 100) i, generate_series(1, 4000) j`,
		`ANALYZE`,
	} {
		if _, err := db.Pool.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var whole time.Duration
	for range 3 { // the fastest of three: the machine is shared
		start := time.Now()
		if ps, err := store.PollsAfter(ctx, "", 1000); err != nil || len(ps) != 100 {
			t.Fatalf("%d polls, %v", len(ps), err)
		}
		if d := time.Since(start); whole == 0 || d < whole {
			whole = d
		}
	}
	rdb, prefix := testenv.Redis(t)
	var logs testenv.LogBuffer
	// The whole catalog in one read would not do; one poll, a hundredth of
	// it, does even on a machine much busier than when it was timed.
	timeout := whole / 3
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("whole read %s, timeout %s; intake's log:\n%s", whole, timeout, logs.String())
		}
	})
	b := setup(t, withStore(store), withRedis(rdb, prefix), withLogger(slog.New(slog.NewTextHandler(&logs, nil))), func(c *config) {
		c.PostgresTimeout = timeout
	})
	b.db = db
	b.waitCatalog(t, "big100")
	if !strings.Contains(logs.String(), "reading smaller pages") {
		t.Fatalf("the catalog loaded in one read of %s under a timeout of %s:\n%s", whole, timeout, logs.String())
	}
	if r := b.readyz(t); r.code != http.StatusOK {
		t.Fatalf("readyz %d %s after the load", r.code, r.raw)
	}
}

// TestCatalogChangeReachesAnotherIntake: polls created over HTTP at
// intake A are held by intake B within a second of A's answer each, by
// the change and its NOTIFY alone (B's periodic check is an hour away),
// and B loads the catalog whole only once. The log shows the time from
// the request to A until B held the poll.
func TestCatalogChangeReachesAnotherIntake(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	hour := func(c *config) { c.CatalogRefresh = time.Hour }
	a := setup(t, withDB(db), withRedis(rdb, prefix), hour)
	b := setup(t, withDB(db), withRedis(rdb, prefix), hour, withKeyOf(a))
	_, admin := a.admin(t, "app")
	var took []time.Duration
	for i := range 20 {
		id := "n" + strconv.Itoa(i)
		start := time.Now()
		if r := a.adminDo(t, http.MethodPost, "/v1/polls", admin, `{"poll_id":"`+id+`","title":"T","choices":["y"]}`); r.code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", id, r.code, r.raw)
		}
		answered := time.Now()
		for !b.srv.CatalogHolds(id) {
			if time.Since(answered) > time.Second {
				t.Fatalf("intake B did not hold poll %s a second after intake A answered its creation", id)
			}
			time.Sleep(100 * time.Microsecond)
		}
		took = append(took, time.Since(start))
		time.Sleep(50 * time.Millisecond) // 20 creations a second at most: the admin's read budget
	}
	slices.Sort(took)
	t.Logf("from the request to intake A to intake B holding the poll: median %s, max %s (20 polls)", took[len(took)/2], took[len(took)-1])
	if got := testutil.ToFloat64(b.m.CatalogLoads); got != 1 {
		t.Fatalf("intake B loaded the catalog whole %v times, want 1", got)
	}
}

// unservedIntake is an intake of cfg (with a credential key of its own
// added) over a database and Redis prefix of the test's own, made but not
// served: it hears no NOTIFY, so what it holds is what it loaded or was
// told by its own admin writes.
func unservedIntake(t *testing.T, cfg intake.Config) (testenv.DB, *ledger.Store, *intake.Server) {
	t.Helper()
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	keys, _ := stream.NewKeys(prefix, 1)
	key, _ := credential.GenerateKey()
	set, _ := credential.NewKeySet(key)
	cfg.Credentials, cfg.TokenKey = credential.NewVerifier(set), &key
	srv, err := intake.New(cfg, store, rdb, keys, testLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return db, store, srv
}
