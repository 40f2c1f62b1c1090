package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/ledger"
)

// This file owns row C, the catalog at growing sizes (issue 35): two
// intakes, A (where the admin writes) and B (where the changes must be
// enforced), on one database whose catalog holds a size's polls (2 or 3
// choices each), polls with eligibility lists and revoked principals. For
// each size it measures B's start (process start to /readyz ready with
// its catalog loaded) and resident memory (after the load, and after a
// burst of changes), the time from a change's answer at A to its
// enforcement at B, the latency of POST /v1/polls, B's vote latency while
// polls are created at A at 10 a second against without, and the rate of
// creating polls in bulk over HTTP and through the CLI. B is started once
// after each stage of the filling too (empty, revoked principals, polls,
// lists), so that the differences of its memory give the memory per poll,
// per eligibility row and per revoked principal. catalog_fill.go fills
// the catalog, catalog_changes.go makes and times the changes,
// catalog_client.go is the HTTP client.

// catalogRun is one size of row C: its database, intakes and client.
type catalogRun struct {
	e            *env
	url          string
	pool         *pgxpool.Pool
	store        *ledger.Store
	client       *catalogClient
	intakeArgs   []string // tally intake and its flags, but --listen
	addrA, addrB string
	b            *proc // intake B, once the catalog is full
}

// catalogResult is what one size measured.
type catalogResult struct {
	shape catalogShape
	// start and rss are B's, after each stage: empty, revoked
	// principals, polls, lists (the last is the full catalog).
	start [4]time.Duration
	rss   [4]float64
	// rssHalf and rssAfter are B's after half the changes of the steady
	// stage and after all of them.
	rssHalf, rssAfter float64
	steadyChanges     int
	changes           changeTimes
	bulkHTTP, bulkCLI float64 // polls/s
	votes             voteRounds
	writes, busy      int64
	// loadsA and loadsB are the intakes' whole loads of the catalog by
	// the end (one each at start).
	loadsA, loadsB int64
}

// catalogSizeIDs name the sizes in the rows: the smallest, the middle one
// and the largest (a short run has two).
func catalogSizeIDs(n int) []string {
	if n == 2 {
		return []string{"S", "L"}
	}
	return []string{"S", "M", "L"}[:n]
}

// measureCatalog: row C at each of the run's catalog sizes.
func measureCatalog(ctx context.Context, e *env, sz sizes, t *table) error {
	ids := catalogSizeIDs(len(sz.catalogPolls))
	var results []catalogResult
	var writes, busy int64
	for i, n := range sz.catalogPolls {
		e.settle(ctx)
		load := loadAvg()
		r, err := e.catalogSize(ctx, sz, shapeOf(n), ids[i])
		if err != nil {
			return fmt.Errorf("catalog of %s polls: %w", count(n), err)
		}
		results = append(results, r)
		writes, busy = writes+r.writes, busy+r.busy
		addCatalogRows(t, ids[i], r, load, sz)
	}
	addCatalogMemory(t, results)
	t.add(fig{id: "CN", what: "catalog: admin writes sent at every size (POST /v1/polls, alone and in bulk, and closings)",
		value: float64(writes), unit: "writes", load: loadAvg(), command: "bench -only catalog"})
	t.add(fig{id: "C503", what: "catalog: of CN, answered 503 (PostgreSQL answered throughout)",
		value: float64(busy), unit: "writes", load: loadAvg(), command: "bench -only catalog"})
	return nil
}

// addCatalogRows adds the rows of one size, id S, M or L.
func addCatalogRows(t *table, id string, r catalogResult, load string, sz sizes) {
	s := r.shape
	cmd := fmt.Sprintf("bench -only catalog  (2 intakes: tally intake --credential-key FILE %s %s; %s)",
		strings.Join(intakeFlags, " "), strings.Join(catalogFlags, " "), s)
	t.add(fig{id: "CS-" + id, what: fmt.Sprintf("catalog: intake start to /readyz ready with its catalog loaded, %s", s),
		value: r.start[3].Seconds(), unit: "s", load: load, command: cmd,
		extra: fmt.Sprintf("empty %.2f s, with the revocations %.2f s, and the polls %.2f s", r.start[0].Seconds(), r.start[1].Seconds(), r.start[2].Seconds())})
	t.add(fig{id: "CM-" + id, what: fmt.Sprintf("catalog: intake RSS once loaded, %s", s),
		value: r.rss[3], unit: "MB", load: load, command: fmt.Sprintf("VmRSS of intake B %s after /readyz said ready", sz.catalogSettle),
		extra: fmt.Sprintf("empty %.0f MB, with the revocations %.0f MB, and the polls %.0f MB", r.rss[0], r.rss[1], r.rss[2])})
	t.add(fig{id: "CMH-" + id, what: fmt.Sprintf("catalog: intake RSS after %s more changes (new polls in bulk requests of 50)", count(r.steadyChanges/2)),
		value: r.rssHalf, unit: "MB", load: load, command: "VmRSS of intake B once it enforced the last of the changes made at A"})
	t.add(fig{id: "CMX-" + id, what: fmt.Sprintf("catalog: intake RSS after %s more changes (and their closings, one a request)", count(r.steadyChanges)),
		value: r.rssAfter, unit: "MB", load: load, command: "VmRSS of intake B once it enforced the last of the changes made at A"})
	t.add(fig{id: "CE-" + id, what: fmt.Sprintf("catalog: a change at intake A (a new poll, or a closing) enforced at intake B, p99 of %d", len(r.changes.enforced)),
		value: msOf(quantile(r.changes.enforced, 0.99)), unit: "ms", load: load, command: cmd,
		extra: fmt.Sprintf("p50 %s, max %s; from A's answer to B's first vote answered as the change says (votes back to back)",
			ms(quantile(r.changes.enforced, 0.5)), ms(slices.Max(r.changes.enforced)))})
	t.add(fig{id: "CP-" + id, what: fmt.Sprintf("catalog: POST /v1/polls of one poll at A, p99 of %d", len(r.changes.create)),
		value: msOf(quantile(r.changes.create, 0.99)), unit: "ms", load: load, command: cmd,
		extra: fmt.Sprintf("p50 %s; a closing p50 %s, p99 %s; whole loads of the catalog by the end: A %d, B %d (one at start)",
			ms(quantile(r.changes.create, 0.5)), ms(quantile(r.changes.close, 0.5)), ms(quantile(r.changes.close, 0.99)), r.loadsA, r.loadsB)})
	addCatalogVoteRows(t, id, r.votes, load, cmd, sz)
	t.add(fig{id: "CB-" + id, what: fmt.Sprintf("catalog: %s polls created with POST /v1/polls of arrays of %d, one request at a time", count(s.polls-s.fromCLI), ledger.MaxPollsPerCreate),
		value: r.bulkHTTP, unit: "polls/s", load: load, command: "POST /v1/polls [ {poll}, ... ] at intake A"})
	t.add(fig{id: "CBC-" + id, what: fmt.Sprintf("catalog: %s polls created with tally poll create --from FILE (the process's start included)", count(s.fromCLI)),
		value: r.bulkCLI, unit: "polls/s", load: load, command: "tally poll create --from FILE"})
}

// addCatalogVoteRows adds the vote rows of one size: B's vote p99 with and
// without polls created at A, each the median of its rounds' p99, and B's
// CPU per poll created.
func addCatalogVoteRows(t *table, id string, v voteRounds, load, cmd string, sz sizes) {
	note := fmt.Sprintf("%d votes/s at B from %d senders; %d rounds of %s each way, alternating", voteRate, voteSenders, len(v.none), sz.catalogVoteFor)
	way := func(rounds [][]time.Duration, cpu []float64) string {
		all := slices.Concat(rounds...)
		return fmt.Sprintf("each round's p99: %s; the p99 of all %d votes %s, p50 %s; B's CPU %.0f µs a vote",
			msList(roundP99s(rounds)), len(all), ms(quantile(all, 0.99)), ms(quantile(all, 0.5)), 1e6*sum(cpu)/float64(max(1, len(all))))
	}
	t.add(fig{id: "CV0-" + id, what: "catalog: vote p99 at intake B, no catalog change: the median of the rounds' p99s (" + note + ")",
		value: msOf(median(roundP99s(v.none))), unit: "ms", load: load, command: cmd, extra: way(v.none, v.cpuNone)})
	created := 0
	for _, n := range v.created {
		created += n
	}
	t.add(fig{id: "CV-" + id, what: "catalog: vote p99 at intake B while polls are created at A at 10/s: the median of the rounds' p99s (" + note + ")",
		value: msOf(median(roundP99s(v.creating))), unit: "ms", load: load, command: cmd,
		extra: fmt.Sprintf("%s; %d polls created", way(v.creating, v.cpuCreating), created)})
	perPoll, pairs := v.cpuPerPoll()
	us := make([]string, len(pairs))
	for i, p := range pairs {
		us[i] = fmt.Sprintf("%.0f", 1e6*p)
	}
	t.add(fig{id: "CVU-" + id, what: "catalog: intake B's CPU per poll created at A: the median over the pairs of rounds of CV's round less CV0's, over the polls created",
		value: 1e6 * perPoll, unit: "µs", load: load, command: cmd,
		extra: fmt.Sprintf("each pair's: %s µs; over all rounds %.0f µs (B's CPU %.3f s with creations, %.3f s without)", strings.Join(us, ", "),
			1e6*(sum(v.cpuCreating)-sum(v.cpuNone))/float64(max(1, created)), sum(v.cpuCreating), sum(v.cpuNone))})
}

// sum is the sum of xs.
func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

// addCatalogMemory adds the memory per poll, per eligibility row and per
// revoked principal, from B's RSS after each stage of the largest size
// (polls: against the smallest size's), and the largest catalog of that
// make the machine's memory would hold.
func addCatalogMemory(t *table, rs []catalogResult) {
	if len(rs) < 2 {
		return
	}
	small, large := rs[0], rs[len(rs)-1]
	load := loadAvg()
	perPoll := 1e6 * (large.rss[2] - large.rss[1] - (small.rss[2] - small.rss[1])) / float64(large.shape.polls-small.shape.polls)
	perRow := 1e6 * (large.rss[3] - large.rss[2]) / float64(large.shape.listPolls*large.shape.listEligible)
	perRevoked := 1e6 * (large.rss[1] - large.rss[0]) / float64(large.shape.revoked)
	cmd := "differences of intake B's VmRSS between the stages of the filling (bench -only catalog)"
	t.add(fig{id: "CMP", what: "catalog: intake memory per poll (2-3 choices, open to any principal)", value: perPoll, unit: "B", load: load, command: cmd,
		extra: fmt.Sprintf("the polls' RSS at %s polls against at %s", count(large.shape.polls), count(small.shape.polls))})
	t.add(fig{id: "CME", what: "catalog: intake memory per eligibility row", value: perRow, unit: "B", load: load, command: cmd,
		extra: fmt.Sprintf("%s rows in %d lists", count(large.shape.listPolls*large.shape.listEligible), large.shape.listPolls)})
	t.add(fig{id: "CMR", what: "catalog: intake memory per revoked principal", value: perRevoked, unit: "B", load: load, command: cmd,
		extra: fmt.Sprintf("%s revoked", count(large.shape.revoked))})
}

// catalogSize measures one size (id names it in the rows).
func (e *env) catalogSize(ctx context.Context, sz sizes, s catalogShape, id string) (catalogResult, error) {
	res := catalogResult{shape: s}
	c, stop, err := e.newCatalogRun(ctx, id)
	if err != nil {
		return res, err
	}
	defer stop()
	// B after each stage of the filling.
	stage := func(i int) error {
		var err error
		res.start[i], res.rss[i], err = c.startB(ctx, sz, i == 3)
		return err
	}
	if err := stage(0); err != nil {
		return res, err
	}
	if err := c.addRevoked(ctx, s.revoked); err != nil {
		return res, err
	}
	if err := stage(1); err != nil {
		return res, err
	}
	a, err := c.startIntake(ctx, c.addrA)
	if err != nil {
		return res, err
	}
	defer a.stop()
	if err := waitReady(ctx, a, c.addrA, sz.catalogReady); err != nil {
		return res, err
	}
	if res.bulkHTTP, err = c.bulkHTTP(ctx, c.addrA, 0, s.polls-s.fromCLI); err != nil {
		return res, err
	}
	if res.bulkCLI, err = c.bulkCLI(ctx, s.polls-s.fromCLI, s.polls); err != nil {
		return res, err
	}
	if err := stage(2); err != nil {
		return res, err
	}
	if err := c.addListPolls(ctx, s); err != nil {
		return res, err
	}
	if err := stage(3); err != nil { // B stays up
		return res, err
	}
	if res.changes, err = c.changesEnforced(ctx, sz.catalogChanges); err != nil {
		return res, err
	}
	if res.votes, err = c.voteRounds(ctx, sz); err != nil {
		return res, err
	}
	res.steadyChanges = sz.catalogSteady
	err = c.steadyChanges(ctx, sz.catalogSteady, func() {
		time.Sleep(sz.catalogSettle)
		res.rssHalf = c.b.rssMB()
	})
	if err != nil {
		return res, err
	}
	time.Sleep(sz.catalogSettle)
	res.rssAfter = c.b.rssMB()
	res.writes, res.busy = c.client.writes.Load(), c.client.busy.Load()
	res.loadsA, res.loadsB = catalogLoads(ctx, c.addrA), catalogLoads(ctx, c.addrB)
	return res, nil
}

// catalogFlags lift the read limit, which admin requests share with a
// principal's reads (10 a second): the one admin makes its changes back
// to back.
var catalogFlags = []string{"--read-rate", "1000", "--read-burst", "1000"}

// newCatalogRun makes a size's database, its admin and voters and their
// tokens; stop stops B if it runs.
func (e *env) newCatalogRun(ctx context.Context, id string) (*catalogRun, func(), error) {
	url, pool, err := e.database(ctx, "catalog"+id)
	if err != nil {
		return nil, nil, err
	}
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	issuer, err := newOwnKeyIssuer(e.tmp)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	admins, err := store.AddPrincipals(ctx, []string{"admin"}, ledger.RoleAdmin)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	voters, err := store.AddPrincipals(ctx, slices.Repeat([]string{"voter"}, 64), ledger.RoleVoter)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	adminAuth, err := issueTokens(issuer.key, admins)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	voterAuth, err := issueTokens(issuer.key, voters)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	keys := e.prefix("catalog" + id)
	c := &catalogRun{e: e, url: url, pool: pool, store: store, client: newCatalogClient(adminAuth[0], voterAuth),
		addrA: "127.0.0.1:18196", addrB: "127.0.0.1:18197",
		intakeArgs: slices.Concat([]string{e.tally, "intake", "--allow-superuser", "--database-url", url, "--redis-url", e.redisURL,
			"--stream-prefix", keys.Prefix(), "--log-level", "error", "--log-format", "text"}, issuer.intakeFlags(), intakeFlags, catalogFlags)}
	return c, func() {
		if c.b != nil {
			c.b.stop()
		}
		pool.Close()
	}, nil
}

// startIntake starts an intake on addr.
func (c *catalogRun) startIntake(ctx context.Context, addr string) (*proc, error) {
	return start(ctx, logFile, append(slices.Clone(c.intakeArgs), "--listen", addr)...)
}

// startB starts intake B, times it to ready, waits sz.catalogSettle and reads its
// RSS; unless keep, it stops it again.
func (c *catalogRun) startB(ctx context.Context, sz sizes, keep bool) (time.Duration, float64, error) {
	t0 := time.Now()
	b, err := c.startIntake(ctx, c.addrB)
	if err != nil {
		return 0, 0, err
	}
	if err := waitReady(ctx, b, c.addrB, sz.catalogReady); err != nil {
		b.stop()
		return 0, 0, err
	}
	took := time.Since(t0)
	time.Sleep(sz.catalogSettle)
	rss := b.rssMB()
	if keep {
		c.b = b
		return took, rss, nil
	}
	return took, rss, b.stop()
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
