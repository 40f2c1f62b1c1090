package ledger

import (
	"context"
	"log/slog"
	"slices"
)

// This file tells whoever listens that a poll's results changed: once an
// append has committed, it sends one NOTIFY on channel tally_results per
// poll it added ledger rows to, and WatchResults listens for them on one
// connection. A listener that reads the results after a notification sees
// the rows it announces; a batch that rolled back announces nothing. A
// notification is a hint to read again, not data: a listener that lost its
// connection may have missed some, and is told so (see WatchResults).
//
// The notification goes after the commit, in a statement of its own, not
// in the append's transaction: PostgreSQL serializes the commits of the
// transactions that notify (a lock on the notification queue, held from
// before the commit record until it is flushed), which made two appends'
// commits take turns for their WAL flushes. A notification on its own
// writes no WAL, so it holds that lock only for a moment. What this costs:
// an append whose process stops between its commit and its notification
// announces nothing (the next append to the poll does), and a notification
// that fails is dropped (its connection most likely failed with the
// listener's, which reads every poll again when it reconnects).

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

// notifyResults notifies ResultsChannel, after the append of events
// committed, for every poll that outcomes recorded a row of, once each. A
// failure is logged and dropped: the append has committed.
func (s *Store) notifyResults(ctx context.Context, events []Event, outcomes []Outcome) {
	var polls []string
	for i, o := range outcomes {
		if o.Status == StatusRecorded {
			polls = append(polls, events[i].PollID)
		}
	}
	if len(polls) == 0 {
		return
	}
	slices.Sort(polls)
	polls = slices.Compact(polls)
	if _, err := s.pool.Exec(ctx, notifyResultsSQL, polls); err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "results not announced to live listeners",
			slog.String("component", "ledger"), slog.Int("polls", len(polls)), slog.String("error", err.Error()))
	}
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
