package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"tally/vote"
)

// Append applies events in one transaction and returns one outcome per
// event, in order. See the package documentation for the rules.
//
// On error nothing of the batch is applied, unless the error came while
// committing: then the batch may or may not have committed, and applying it
// again is the way to find out (what committed answers duplicate).
// IsRetryable tells transient errors from permanent ones; an
// *InvalidEventError names the event that made the batch unusable.
func (s *Store) Append(ctx context.Context, events []Event) ([]Outcome, error) {
	if len(events) == 0 {
		return nil, nil
	}
	if len(events) > s.cfg.MaxBatch {
		return nil, fmt.Errorf("append batch of %d events: %w (at most %d)", len(events), ErrBatchTooLarge, s.cfg.MaxBatch)
	}
	for i, e := range events {
		if err := validateEvent(i, e); err != nil {
			return nil, fmt.Errorf("append batch: %w", err)
		}
	}
	var outcomes []Outcome
	var read *latestRead
	err := s.runTx(ctx, "append batch", pgx.TxOptions{}, func(tx pgx.Tx) error {
		rules, err := s.rulesOf(ctx, tx, events)
		if err != nil {
			return err
		}
		outcomes, read, err = appendTx(ctx, tx, &s.voters, events, rules, !s.fullPathOnly)
		return err
	})
	if err != nil {
		return nil, err
	}
	read.committed(&s.voters)
	s.notifyResults(ctx, events, outcomes)
	return outcomes, nil
}

type keyOf struct{ principal, key string }
type pollPrincipal struct{ poll, principal string }

// errRaced: a concurrent transaction committed first a row this batch's
// rows conflict with: a row of the same key, between this batch's read of
// the facts and its insert, or a later ballot of the same principal in a
// poll of answers latest (lastBallots). The transaction is rolled back and
// run again, and then sees that row.
var errRaced = errors.New("a concurrent append committed a conflicting row first")

// appendTx classifies and applies events inside tx, in two steps.
//
// First, when fast is set, the optimistic step: the events that are the
// first of their key and, in a poll whose first answer is final, of their
// (poll, principal) in the batch (freshEvents) go to the
// ledger in one INSERT that keeps only events valid by the catalog (poll
// known, open at received_at, choice offered, open to any principal) and
// whose key has no rejection record; if a ledger row is in the way, it
// runs again leaving out the events that conflict with one (insertFresh).
// Every row it inserts is an event the full rules would record: nothing in
// the database or earlier in the batch claimed its key or its (poll,
// principal). In the common case, a batch of new events, that one
// statement is the whole append.
//
// After the second step it reads the ballots that its rows of polls of
// answers latest replace (readLatest, ballots_latest.go; book is what the
// Store knows of who has one, voters.go), adds the new rows to their
// polls' logs, under their heads, which it locks only then
// (log_store.go), reads again the replaced ballots of the polls whose
// logs grew in between (recheck), and adds the figures of the new rows'
// ballots of other kinds than single, and of every ballot of a poll of
// answers latest, to the projection (rules are their polls').
//
// Then the full rules (classify), for every event the first step did not
// record. No event the first step left out could have claimed what an
// event it inserted took: such an event is either a repeat of a key (it
// claims nothing), invalid by the catalog (it claims nothing), or its
// (poll, principal) of a final poll came first in the batch, and then the
// event inserted would have been left out instead. (In a poll of answers
// latest nothing claims a (poll, principal). A principal's rows there
// must still reach the ledger in batch order, and do: an event of such a
// poll that the first step leaves out is refused by the full rules too,
// or is of a poll open to a list of principals, all of whose events the
// first step leaves out.)
func appendTx(ctx context.Context, tx pgx.Tx, book *voterBook, events []Event, rules map[string]*pollRules, fast bool) ([]Outcome, *latestRead, error) {
	in := appendInput{events: events, fps: fingerprints(events), latest: latestOf(events, rules)}
	in.ballotOK, in.ballots = readBallots(events, rules)
	outcomes, err := recordEvents(ctx, tx, in, fast)
	if err != nil {
		return nil, nil, err
	}
	read, err := readLatest(ctx, tx, book, in, outcomes, rules)
	if err != nil {
		return nil, nil, err
	}
	moves, err := appendLogs(ctx, tx, events, outcomes)
	if err != nil {
		return nil, nil, err
	}
	if err := read.recheck(ctx, tx, book, events, moves); err != nil {
		return nil, nil, err
	}
	if err := addFigures(ctx, tx, in, outcomes, rules, read); err != nil {
		return nil, nil, err
	}
	return outcomes, read, nil
}

// recordEvents runs appendTx's two steps, the optimistic one when fast is
// set and the full rules for what it did not record, and returns every
// event's outcome.
func recordEvents(ctx context.Context, tx pgx.Tx, in appendInput, fast bool) ([]Outcome, error) {
	outcomes := make([]Outcome, len(in.events))
	rest := make([]int, 0, len(in.events))
	if fast {
		seqs, err := insertFresh(ctx, tx, in, freshEvents(in.events, in.latest))
		if err != nil {
			return nil, err
		}
		for i := range in.events {
			if seq, ok := seqs[i]; ok {
				outcomes[i] = Outcome{Status: StatusRecorded, Seq: seq}
			} else {
				rest = append(rest, i)
			}
		}
	} else {
		for i := range in.events {
			rest = append(rest, i)
		}
	}
	if len(rest) > 0 {
		if err := classify(ctx, tx, in, rest, outcomes); err != nil {
			return nil, err
		}
	}
	return outcomes, nil
}

// fingerprints are the payload fingerprints of events, in order.
func fingerprints(events []Event) [][32]byte {
	fps := make([][32]byte, len(events))
	for i, e := range events {
		fps[i] = vote.Fingerprint(e.PollID, e.Answer())
	}
	return fps
}

// freshEvents returns the index of every event that is the first of its
// (principal, key) in the batch and, unless its poll's answers are latest
// (where a principal's later ballots are recorded too), the first of its
// (poll, principal).
func freshEvents(events []Event, latest []bool) []int {
	keys := make(map[keyOf]bool, len(events))
	answers := make(map[pollPrincipal]bool, len(events))
	fresh := make([]int, 0, len(events))
	for i, e := range events {
		k, pp := keyOf{e.PrincipalID, e.ClientEventID}, pollPrincipal{e.PollID, e.PrincipalID}
		if !keys[k] && (latest[i] || !answers[pp]) {
			fresh = append(fresh, i)
		}
		keys[k], answers[pp] = true, true
	}
	return fresh
}
