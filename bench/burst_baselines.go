package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/ledger"
)

// This file owns the burst's two baselines: the bare 202 handler
// (bench/bareserver) and the seed's synchronous design
// (bench/syncserver), each sent the same burst as intake.

// burstBare runs one round against the bare handler, sent by wrk or,
// with goClient, by the bench's Go client.
func (e *env) burstBare(ctx context.Context, sz sizes, goClient bool) (burstRun, error) {
	n := sz.burstVoters
	r := burstRun{n: n}
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = "bare-" + itoa(i)
	}
	p, err := start(ctx, logFile, e.bare, "-listen", burstBareAddr)
	if err != nil {
		return r, err
	}
	defer p.stop()
	if err := waitHealthy(ctx, p, burstBareAddr); err != nil {
		return r, err
	}
	bodies, auths := burstRequests(tokens, "burst-bare", n, nil)
	server := &pipeline{intakes: []*proc{p}}
	cpu0 := e.serverCPU(ctx, server, "")
	_, err = e.send(goClient)(ctx, burstBareAddr, bodies, auths, http.StatusAccepted, sz.burstFor, &r)
	r.counted = r.answered
	cpu1 := e.serverCPU(ctx, server, "")
	cpu1.client = r.clientCPU
	r.cpu = cpu1.perVote(cpu0, int64(n))
	return r, err
}

// burstSync runs one round against the synchronous design: its
// principals hold token hashes, as the seed's did.
func (e *env) burstSync(ctx context.Context, url string, round int, sz sizes) (burstRun, error) {
	n := sz.burstVoters
	r := burstRun{n: n}
	db := e.dbName("burstsync")
	poll := "burst-" + itoa(round)
	tokens, err := syncPrincipals(ctx, url, poll, n)
	if err != nil {
		return r, err
	}
	e.checkpoint(ctx)
	c0, err := e.commitsQuiet(ctx, db)
	if err != nil {
		return r, err
	}
	p, err := start(ctx, logFile, e.syncSrv, "-listen", burstSyncAddr, "-database-url", url, "-max-conns", "16")
	if err != nil {
		return r, err
	}
	defer p.stop()
	if err := waitHealthy(ctx, p, burstSyncAddr); err != nil {
		return r, err
	}
	bodies, auths := burstRequests(tokens, poll, n, nil)
	server := &pipeline{intakes: []*proc{p}}
	cpu0 := e.serverCPU(ctx, server, db)
	if _, err := e.wrkBurst(ctx, burstSyncAddr, bodies, auths, http.StatusOK, sz.burstFor, &r); err != nil {
		return r, err
	}
	r.counted = r.answered // each vote committed before its answer
	cpu1 := e.serverCPU(ctx, server, db)
	cpu1.client = r.clientCPU
	r.cpu = cpu1.perVote(cpu0, int64(n))
	if err := p.stop(); err != nil {
		return r, fmt.Errorf("syncserver: %w", err)
	}
	c1, err := e.commitsQuiet(ctx, db)
	if err != nil {
		return r, err
	}
	r.commits = c1 - c0
	return r, checkCounted(ctx, url, poll, n)
}

// syncPrincipals creates poll and n principals with random tokens whose
// SHA-256 is stored in sync_tokens, the synchronous design's table of
// tokens (tally stores none), and returns the tokens.
func syncPrincipals(ctx context.Context, url, poll string, n int) ([]string, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return nil, err
	}
	if err := store.CreatePoll(ctx, ledger.Poll{ID: poll, Title: "bench burst", OpensAt: time.Unix(0, 0), Choices: benchChoices}); err != nil {
		return nil, err
	}
	tokens := make([]string, n)
	ids, names, hashes := make([]string, n), make([]string, n), make([][]byte, n)
	for i := range tokens {
		tokens[i] = "sync-" + rand.Text()
		h := sha256.Sum256([]byte(tokens[i]))
		ids[i], names[i], hashes[i] = poll+"-v"+itoa(i), poll+" voter "+itoa(i), h[:]
	}
	if _, err := pool.Exec(ctx, syncTokensSQL); err != nil {
		return nil, err
	}
	_, err = pool.Exec(ctx, `
WITH added AS (INSERT INTO principals (id, name) SELECT * FROM unnest($1::text[], $2::text[]) RETURNING id)
INSERT INTO sync_tokens (token_sha256, principal_id) SELECT * FROM unnest($3::bytea[], $1::text[])`, ids, names, hashes)
	return tokens, err
}

// syncTokensSQL makes the synchronous design's table of tokens: the
// SHA-256 of each, its principal, and whether it was revoked.
const syncTokensSQL = `CREATE TABLE IF NOT EXISTS sync_tokens (
    token_sha256 bytea PRIMARY KEY CHECK (length(token_sha256) = 32),
    principal_id text NOT NULL,
    revoked_at   timestamptz
)`
