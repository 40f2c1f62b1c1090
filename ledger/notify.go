package ledger

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
)

// This file tells whoever listens that a poll's results changed: an append
// sends one NOTIFY on channel tally_results per poll it added ledger rows
// to, from its own transaction, and WatchResults listens for them on one
// connection. PostgreSQL delivers a notification at commit, and only
// then, so a listener that reads the results after one sees the rows it
// announces; a batch that rolls back announces nothing. A notification
// is a hint to read again, not data: a listener that lost its connection
// may have missed some, and is told so (see WatchResults).

// ResultsChannel is the channel an append notifies, with a poll id as the
// payload, when it added ledger rows to that poll.
const ResultsChannel = "tally_results"

// notifyResultsSQL notifies ResultsChannel once per poll. pg_notify takes
// no privilege beyond running the function, which PUBLIC may; PostgreSQL
// folds identical notifications of one transaction into one, and a batch
// sends each poll once anyway.
const notifyResultsSQL = `SELECT pg_notify('tally_results', p) FROM unnest($1::text[]) AS t(p)`

// listenResultsSQL subscribes to ResultsChannel.
const listenResultsSQL = `LISTEN tally_results`

// notifyResults notifies ResultsChannel inside tx for every poll that
// outcomes recorded a row of, once each.
func notifyResults(ctx context.Context, tx pgx.Tx, events []Event, outcomes []Outcome) error {
	var polls []string
	for i, o := range outcomes {
		if o.Status == StatusRecorded {
			polls = append(polls, events[i].PollID)
		}
	}
	if len(polls) == 0 {
		return nil
	}
	slices.Sort(polls)
	polls = slices.Compact(polls)
	if _, err := tx.Exec(ctx, notifyResultsSQL, polls); err != nil {
		return interpretError("append batch: notify the results' listeners", err)
	}
	return nil
}

// WatchResults holds one connection that listens on ResultsChannel and
// calls fn with the poll id of each notification, until ctx ends. When
// the connection fails it reconnects as WatchCatalog does (a backoff from
// 100ms doubling up to 10s, starting again once a connection listened).
// On every (re)connection, once LISTEN took effect, fn is called with ""
// to say that any poll may have changed meanwhile: results read after
// that call miss nothing a later notification would not report. fn runs
// on the listening goroutine: it should only note the change and return.
func (s *Store) WatchResults(ctx context.Context, fn func(pollID string)) {
	s.keepListening(ctx, "results", func(ctx context.Context) (bool, error) { return s.watchResultsOnce(ctx, fn) })
}

// watchResultsOnce listens on one connection until it fails or ctx ends.
// listened reports that the LISTEN took effect.
func (s *Store) watchResultsOnce(ctx context.Context, fn func(string)) (listened bool, err error) {
	pconn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	conn := pconn.Hijack() // a LISTENing connection must not go back to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, listenResultsSQL); err != nil {
		return false, err
	}
	fn("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if n.Payload != "" {
			fn(n.Payload)
		}
	}
}
