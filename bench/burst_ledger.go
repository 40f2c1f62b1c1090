package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/ledger"
	"tally/vote"
)

// This file owns the burst's ledger side: the poll and principals a round
// votes with, made on the database, and the check that every vote of the
// round was counted.

// burstPrincipals creates poll and n principals on the database at url,
// setting their creation age back, and returns their tokens and the
// token of one more principal, a probe; the pool it used is closed when
// it returns.
func burstPrincipals(ctx context.Context, url, poll string, n int, rules vote.Rules, age time.Duration, iss burstIssuer) (tokens []string, probe string, err error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, "", err
	}
	defer pool.Close()
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return nil, "", err
	}
	if err := store.CreatePoll(ctx, ledger.Poll{ID: poll, Title: "bench burst", OpensAt: time.Unix(0, 0), Choices: benchChoices, Rules: rules}); err != nil {
		return nil, "", err
	}
	names := make([]string, n+1)
	for i := range names {
		names[i] = poll + " voter " + itoa(i)
	}
	if !iss.rows() {
		ps := make([]ledger.Principal, len(names))
		for i, name := range names {
			ps[i] = ledger.Principal{Name: name}
		}
		if tokens, err = iss.issue(ps, time.Now()); err != nil {
			return nil, "", err
		}
		return tokens[:n], tokens[n], nil
	}
	ps, err := store.AddPrincipals(ctx, names, "")
	if err != nil {
		return nil, "", err
	}
	created := ps[0].CreatedAt.Add(-age)
	if age > 0 {
		ids := make([]string, len(ps))
		for i, p := range ps {
			ids[i] = p.ID
		}
		if _, err := pool.Exec(ctx, `UPDATE principals SET created_at = $1 WHERE id = ANY($2)`, created, ids); err != nil {
			return nil, "", err
		}
	}
	tokens, err = iss.issue(ps, created)
	if err != nil {
		return nil, "", err
	}
	return tokens[:n], tokens[n], nil
}

// checkCounted fails unless poll's results count n ballots, one of each
// principal that voted.
func checkCounted(ctx context.Context, url, poll string, n int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return err
	}
	res, err := store.Results(ctx, poll)
	if err != nil {
		return err
	}
	if res.Ballots != int64(n) {
		return fmt.Errorf("poll %s counts %d ballots, want %d", poll, res.Ballots, n)
	}
	return nil
}
