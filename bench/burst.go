package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sethvargo/go-retry"

	"tally/stream"
)

// This file owns the burst: sizes.burstVoters principals, created before
// intake started, each vote once into one poll with a credential intake
// has never seen, burstConcurrency requests at a time, through tally
// intake with the projector running. The client is wrk with a script that
// posts each vote of a file once (burst_wrk.go), as light as a client on
// a machine of its own; B-go and BB-go send the same burst from the
// bench's Go client (burst_load.go), whose CPU the rows show beside
// wrk's. Side by side, in alternating rounds,
// the same requests go to the bare 202 handler (bench/bareserver)
// and to the seed's synchronous design (bench/syncserver: the
// token looked up in PostgreSQL, the vote inserted and counted in one
// transaction per request). Each round of each intake variant gets a fresh
// intake and projector, fresh principals and a poll of its own.
//
// Rows: B (accepted/s), BC (counted/s: from the first request until the
// last vote is in poll_results), BX (PostgreSQL commits per vote beyond
// the projector's batches), BU and BUI (B's server-side and intake's CPU
// per vote), B-LC and B-LCC (the same burst with intake's
// --ledger-check, its principals two days old), B-OIDC and B-OIDCC (the
// same burst with RS256 tokens of a local OpenID Connect issuer), B-go
// and B-goC (B from the Go client), BB (the bare handler), BB-go (from the
// Go client), BS (the synchronous design, which counts as it answers).
//
// Each row of a target also says where a vote's CPU time goes: the
// user and system time (/proc/PID/stat) of intake, the projector, the
// PostgreSQL backends connected to the target's database (read before
// they exit), and Redis (INFO cpu: the whole server's), from just before
// the first request until the last vote is counted, divided by the votes;
// and the client's while it sent. PostgreSQL's own processes (WAL writer,
// checkpointer, autovacuum) are left out: the server is shared.
//
// PostgreSQL's commits are xact_commit of the variant's database in
// pg_stat_database. A backend publishes its counts lazily (PostgreSQL 15:
// at most once a second while busy, ten seconds after it went idle) but
// always when it exits, and pg_stat_force_next_flush only flushes the
// backend that calls it. So the counts are read, from the admin database,
// before intake and the projector start and after they stopped and their
// backends are gone, and the commits of a start and stop without votes
// (measured once per variant) are subtracted. The projector's batches are
// its tally_projector_batch_size count. Each batch commits the append's
// transaction and then its notification (ledger.Store.Append), and every
// backend of the database that LISTENs, on whatever channel, reads each
// notification in a transaction of its own: intake's listener of
// tally_catalog commits once a batch, though intake queries nothing.

// burstConcurrency is the requests under way at once.
const burstConcurrency = 64

// burstCommitsPerBatch are the projector's commits of one batch that
// records votes: the append's transaction and its notification.
const burstCommitsPerBatch = 2

// send is the client that sends a burst: wrk (wrkBurst) or the bench's
// Go client (sendBurst).
func (e *env) send(goClient bool) func(ctx context.Context, addr string, bodies [][]byte, auths []string, want int, limit time.Duration, r *burstRun) (time.Time, error) {
	if goClient {
		return sendBurst
	}
	return e.wrkBurst
}

// clientWords names the client of a burst in a row's command.
func clientWords(goClient bool) string {
	if goClient {
		return fmt.Sprintf("%d requests at a time from the bench, Go net/http", burstConcurrency)
	}
	return fmt.Sprintf("%d requests at a time from wrk -t%d (bench/testdata/burst_vote.lua: each vote of a file once)", burstConcurrency, burstWrkThreads)
}

// Addresses of the burst's servers.
const (
	burstIntakeAddr  = "127.0.0.1:18195"
	burstMetricsAddr = "127.0.0.1:18196" // the projector's /metrics
	burstBareAddr    = "127.0.0.1:18197"
	burstSyncAddr    = "127.0.0.1:18198"
)

// measureBurst: B, BC, BX, BU, BUI, B-go, B-goC, B-LC, B-LCC, B-OIDC,
// B-OIDCC, the kinds' B rows, BB, BB-go and BS.
func measureBurst(ctx context.Context, e *env, sz sizes, t *table) error {
	if e.bare == "" || e.syncSrv == "" {
		return errors.New("the burst needs -bare and -sync (the servers of bench/bareserver and bench/syncserver; scripts/bench.sh builds them)")
	}
	if e.wrk == "" {
		t.skip("burst", "wrk, its client, is not installed: install it (apt-get install -y wrk) and run again")
		return nil
	}
	load := loadAvg()
	own, err := newOwnKeyIssuer(e.tmp)
	if err != nil {
		return err
	}
	oidc, err := newOIDCIssuer()
	if err != nil {
		return err
	}
	defer oidc.close()
	variants := slices.Concat(burstVariants(own, oidc), burstKindVariants(own))
	res, bare, bareGo, syncd, err := e.burst(ctx, variants, sz)
	if err != nil {
		return err
	}
	n := sz.burstVoters
	note := fmt.Sprintf("median of %d alternating round(s)", sz.burstRounds)
	if sz.burstRounds == 1 {
		note = "one round"
	}
	for i, v := range variants {
		s := res[i]
		perVote := s.median(s.perVote)
		cmd := fmt.Sprintf("bench -only burst  (%s; tally intake %s and tally projector, started after the principals were created)",
			clientWords(v.goClient), strings.Join(slices.Concat(intakeFlags, v.flags, v.issuer.shownFlags()), " "))
		t.add(fig{id: v.id, what: fmt.Sprintf("the burst: %s votes of %s principals into one poll with %s intake never saw, %s; %d requests at a time, the projector running (%s)",
			thousands(float64(n)), thousands(float64(v.principals(n))), v.issuer.describe(), v.what, burstConcurrency, note),
			value: s.median(burstRun.accepted), unit: "votes/s accepted",
			extra: fmt.Sprintf("p50 %s, p99 %s of the 202; counted %s votes/s; %s; PostgreSQL commits per vote %.4f (%s beyond the projector's batches); rounds %s votes/s",
				ms(time.Duration(s.median(p50))), ms(time.Duration(s.median(p99))), thousands(s.median(burstRun.countedRate)),
				s.cpuNote(cpuIntake, cpuProjector, cpuPostgres, cpuRedis), perVote, beyondNote(s), s.rounds(burstRun.accepted)),
			load: load, command: cmd})
		t.add(fig{id: v.id + "C", what: "counted: " + v.id + "'s votes from the first request until the last one is in poll_results (the projector's stream empty)",
			value: s.median(burstRun.countedRate), unit: "votes/s", extra: "rounds " + s.rounds(burstRun.countedRate) + " votes/s",
			load: load, command: cmd})
		if v.id == "B" {
			t.add(fig{id: "BX", what: "B's PostgreSQL commits per vote beyond the projector's batches (xact_commit of its database, less the commits of intake's and the projector's start and stop without votes and those of the batches: the append, its notification, and each listening backend's read of the notification)",
				value: s.median(func(r burstRun) float64 { return float64(s.beyond(r)) / float64(r.n) }), unit: "commits per vote",
				extra: commitsNote(s), load: load, command: "pg_stat_database.xact_commit before intake and the projector started and after they stopped; tally_projector_batch_size_count"})
			c := s.cpu()
			server := c.intakes + c.projector + c.postgres + c.redis
			t.add(fig{id: "BU", what: "B's server-side CPU time per vote accepted and counted: intake, projector, the PostgreSQL backends of its database and Redis (the whole server's), over every round",
				value: server, unit: "µs", extra: s.cpuNote(cpuIntake, cpuProjector, cpuPostgres, cpuRedis), load: load,
				command: "/proc/PID/stat (utime+stime) of intake, the projector and the database's backends, and Redis' INFO cpu, from before the first request until the stream was empty"})
			t.add(fig{id: "BUI", what: "intake's share of BU: its CPU time per vote", value: c.intakes, unit: "µs", load: load,
				command: "/proc/PID/stat of intake, as BU"})
		}
	}
	for _, b := range []struct {
		id, what string
		side     burstSide
		goClient bool
	}{{"BB", "", bare, false}, {"BB-go", " from the bench's Go client, as B-go's", bareGo, true}} {
		t.add(fig{id: b.id, what: "the bare net/http handler answering 202 to the same burst" + b.what + " (" + note + ")",
			value: b.side.median(burstRun.accepted), unit: "req/s",
			extra: fmt.Sprintf("p50 %s, p99 %s; %s; rounds %s req/s", ms(time.Duration(b.side.median(p50))), ms(time.Duration(b.side.median(p99))),
				b.side.cpuNote(cpuServer), b.side.rounds(burstRun.accepted)),
			load: load, command: "bench -only burst  (" + clientWords(b.goClient) + "; go -C bench run ./bareserver)"})
	}
	t.add(fig{id: "BS", what: "the synchronous design under the same burst: a net/http handler that looks the token up (SHA-256 in principals), then inserts the vote (ON CONFLICT DO NOTHING) and upserts the tally in one transaction, and answers once it committed (" + note + ")",
		value: syncd.median(burstRun.countedRate), unit: "votes/s counted",
		extra: fmt.Sprintf("p50 %s, p99 %s; %s; PostgreSQL commits per vote %.2f; rounds %s votes/s", ms(time.Duration(syncd.median(p50))), ms(time.Duration(syncd.median(p99))),
			syncd.cpuNote(cpuServer, cpuPostgres), syncd.median(syncd.perVote), syncd.rounds(burstRun.countedRate)),
		load: load, command: "bench -only burst  (" + clientWords(false) + "; go -C bench run ./syncserver -max-conns 16)"})
	return nil
}

// burst runs the rounds: each intake variant, the bare handler (from wrk
// and from the Go client) and the synchronous design in turn, every round
// with fresh principals.
func (e *env) burst(ctx context.Context, variants []burstVariant, sz sizes) (res []burstSide, bare, bareGo, syncd burstSide, err error) {
	urls := make([]string, len(variants))
	keys := make([]stream.Keys, len(variants))
	res = make([]burstSide, len(variants))
	for i, v := range variants {
		var pool *pgxpool.Pool
		if urls[i], pool, err = e.database(ctx, v.db); err != nil {
			return
		}
		pool.Close()
		keys[i] = e.prefix(v.db)
		if res[i].startup, err = e.burstStartup(ctx, v, urls[i], keys[i]); err != nil {
			return
		}
	}
	syncURL, pool, err := e.database(ctx, "burstsync")
	if err != nil {
		return
	}
	pool.Close()
	for round := range sz.burstRounds {
		for i, v := range variants {
			var r burstRun
			if r, err = e.burstIntake(ctx, v, urls[i], keys[i], round, sz); err != nil {
				return res, bare, bareGo, syncd, fmt.Errorf("%s, round %d: %w", v.id, round+1, err)
			}
			res[i].runs = append(res[i].runs, r)
		}
		var r burstRun
		if r, err = e.burstBare(ctx, sz, false); err != nil {
			return res, bare, bareGo, syncd, fmt.Errorf("the bare handler, round %d: %w", round+1, err)
		}
		bare.runs = append(bare.runs, r)
		if r, err = e.burstBare(ctx, sz, true); err != nil {
			return res, bare, bareGo, syncd, fmt.Errorf("the bare handler from the Go client, round %d: %w", round+1, err)
		}
		bareGo.runs = append(bareGo.runs, r)
		if r, err = e.burstSync(ctx, syncURL, round, sz); err != nil {
			return res, bare, bareGo, syncd, fmt.Errorf("the synchronous design, round %d: %w", round+1, err)
		}
		syncd.runs = append(syncd.runs, r)
	}
	return res, bare, bareGo, syncd, nil
}

// burstServers starts intake (the variant's) and a projector with its
// metrics on burstMetricsAddr, and waits until both answer, the check of
// intake's /readyz its issuer names is ok, and intake takes a vote on
// poll: a probe vote for an unknown choice is answered 422 once intake
// holds the poll and the revocations, and is not enqueued.
func (e *env) burstServers(ctx context.Context, v burstVariant, url string, keys stream.Keys, poll, probe string) (*pipeline, error) {
	common := []string{"--database-url", url, "--log-format", "text", "--redis-url", e.redisURL, "--stream-prefix", keys.Prefix()}
	sh := shape{addrs: []string{burstIntakeAddr}, projector: []string{"--metrics-listen", burstMetricsAddr}}
	p, err := e.startShape(ctx, sh, common, slices.Concat(v.flags, v.issuer.intakeFlags())...)
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, p.projector, burstMetricsAddr); err != nil {
		p.stop()
		return nil, err
	}
	if check := v.issuer.readyCheck(); check != "" {
		if err := waitReadyCheck(ctx, burstIntakeAddr, check); err != nil {
			p.stop()
			return nil, err
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	err = retry.Do(ctx, retry.WithMaxDuration(15*time.Second, retry.NewConstant(100*time.Millisecond)), func(ctx context.Context) error {
		code, err := postBurstVote(ctx, client, burstIntakeAddr, []byte(`{"event_id":"probe","poll_id":"`+poll+`",`+v.probeAnswer()+`}`), "Bearer "+probe)
		if err == nil && code != http.StatusUnprocessableEntity {
			err = fmt.Errorf("the probe vote got %d, not 422", code)
		}
		return retry.RetryableError(err)
	})
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("intake did not take votes on poll %s within 15s: %w", poll, err)
	}
	return p, nil
}

// burstStartup is the commits of the variant's intake and projector
// starting, taking a probe vote and stopping, without votes.
func (e *env) burstStartup(ctx context.Context, v burstVariant, url string, keys stream.Keys) (int64, error) {
	db := e.dbName(v.db)
	_, probe, err := burstPrincipals(ctx, url, "burst-idle", 0, v.rules(), v.age, v.issuer)
	if err != nil {
		return 0, err
	}
	c0, err := e.commitsQuiet(ctx, db)
	if err != nil {
		return 0, err
	}
	p, err := e.burstServers(ctx, v, url, keys, "burst-idle", probe)
	if err != nil {
		return 0, err
	}
	p.stop()
	c1, err := e.commitsQuiet(ctx, db)
	return c1 - c0, err
}

// burstIntake runs one round of the variant v.
func (e *env) burstIntake(ctx context.Context, v burstVariant, url string, keys stream.Keys, round int, sz sizes) (burstRun, error) {
	n := sz.burstVoters
	r := burstRun{n: n}
	db := e.dbName(v.db)
	poll := "burst-" + itoa(round)
	tokens, probe, err := burstPrincipals(ctx, url, poll, v.principals(n), v.rules(), v.age, v.issuer)
	if err != nil {
		return r, err
	}
	e.checkpoint(ctx)
	c0, err := e.commitsQuiet(ctx, db)
	if err != nil {
		return r, err
	}
	p, err := e.burstServers(ctx, v, url, keys, poll, probe)
	if err != nil {
		return r, err
	}
	defer p.stop()
	b0, err := projectorBatches(ctx, burstMetricsAddr)
	if err != nil {
		return r, err
	}
	if r.listeners, err = e.listeners(ctx, db); err != nil {
		return r, err
	}
	bodies, auths := burstRequests(tokens, poll, n, v.load)
	cpu0 := e.serverCPU(ctx, p, db)
	start, err := e.send(v.goClient)(ctx, burstIntakeAddr, bodies, auths, http.StatusAccepted, sz.burstFor, &r)
	if err != nil {
		return r, err
	}
	if err := e.waitStreamEmpty(ctx, keys, start, sz.burstFor, &r); err != nil {
		return r, err
	}
	cpu1 := e.serverCPU(ctx, p, db)
	cpu1.client = r.clientCPU
	r.cpu = cpu1.perVote(cpu0, int64(n))
	b1, err := projectorBatches(ctx, burstMetricsAddr)
	if err != nil {
		return r, err
	}
	r.batches = b1 - b0
	p.stop()
	c1, err := e.commitsQuiet(ctx, db)
	if err != nil {
		return r, err
	}
	r.commits = c1 - c0
	if dead, err := e.rdb.XLen(ctx, keys.DeadLetter(0)).Result(); err != nil || dead > 0 {
		return r, fmt.Errorf("the dead-letter stream holds %d entries (%v)", dead, err)
	}
	return r, checkCounted(ctx, url, poll, v.principals(n))
}
