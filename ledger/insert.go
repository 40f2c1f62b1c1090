package ledger

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"tally/vote"
)

// The two inserts of Append's steps are one statement (insertSQL) that
// differs only in which rows of the batch it keeps: they append ledger
// rows chosen from the batch and, in the same statement, add the single
// choices among them to the projection, per (poll, candidate) in a fixed
// order (the figures of other ballots are added by the statement after
// it: ballots.go). They do not number the rows in their polls' logs: the
// append does that after both steps, under the polls' log heads
// (log_store.go), so concurrent appends to one poll overlap here and meet
// only on its poll_results rows, from the insert to the commit, as before
// the log. Two appends meet on the unique indexes only through a
// principal in both batches, which the projector's lanes make rare; both
// insert in the order of (principal, key), so that two appends that do
// meet there take the index entries in the same order rather than
// deadlock (one that PostgreSQL still reports is retried). Insert order
// is not leaf order: the append numbers its rows in batch order.
//
// $8 says, per event, that its ballot (of another kind than single) is one
// its poll's rules take (readBallots): a single choice is checked against
// poll_choices here, and only in a poll of kind single. $9 says that its
// poll's answers are latest: the row is marked so, it may follow another
// of its principal in the poll, and its figures are added with the old
// ballot's taken out (ballots.go), not here. Such rows of one principal
// are inserted in batch order, so that their seqs are in the order of
// their leaves: the last by seq is the one that counts.

// insertSQL is the insert of the rows keep chooses from the batch's input.
func insertSQL(keep string) string {
	return `
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::timestamptz[], $7::text[], $8::bool[], $9::bool[]) WITH ORDINALITY
        AS i(principal_id, client_event_id, poll_id, candidate_id, fingerprint, received_at, ballot, ballot_ok, latest, ord)
), keep AS (` + keep + `
), ins AS (
    INSERT INTO poll_events (poll_id, candidate_id, ballot, principal_id, client_event_id, fingerprint, received_at, latest)
    SELECT poll_id, candidate_id, ballot, principal_id, client_event_id, fingerprint, received_at, latest
    FROM keep
    ORDER BY principal_id, CASE WHEN latest THEN ord END, client_event_id
    RETURNING seq, principal_id, client_event_id, poll_id, candidate_id, ballot, latest
), proj AS (
    INSERT INTO poll_results AS r (poll_id, candidate_id, vote_count)
    SELECT poll_id, candidate_id, count(*) FROM ins WHERE ballot IS NULL AND NOT latest
    GROUP BY poll_id, candidate_id ORDER BY poll_id, candidate_id
    ON CONFLICT (poll_id, candidate_id) DO UPDATE SET vote_count = r.vote_count + EXCLUDED.vote_count
)
SELECT principal_id, client_event_id, seq FROM ins`
}

// freshKeep is the optimistic step's choice: the events that are valid
// by the catalog and whose key has no rejection record. It is stricter
// than the full rules, never looser: an event it skips gets the full
// rules. ledgerProbes is the part that also leaves out the events that
// conflict with a ledger row; without it a conflict is a unique
// violation.
func freshKeep(ledgerProbes string) string {
	return `
    SELECT i.*
    FROM input i
    CROSS JOIN LATERAL (SELECT opens_at, closes_at, eligibility, ballot_kind FROM polls WHERE id = i.poll_id LIMIT 1) p
    WHERE p.eligibility = 'any'
      AND poll_open_at(p.opens_at, p.closes_at, i.received_at)
      AND (i.ballot_ok OR p.ballot_kind = 'single' AND i.ballot IS NULL
           AND EXISTS (SELECT 1 FROM poll_choices c WHERE c.poll_id = i.poll_id AND c.candidate_id = i.candidate_id))
      AND (SELECT 1 FROM poll_event_rejections r
           WHERE r.principal_id = i.principal_id AND r.client_event_id = i.client_event_id LIMIT 1) IS NULL` + ledgerProbes
}

// insertNewSQL is the optimistic step for a batch none of whose keys and
// (poll, principal) pairs is in the ledger, the common case: it leaves the
// ledger's unique indexes to find a conflict, which makes the statement
// fail (insertFresh then runs insertFreshSQL instead). Probing both
// indexes before the insert, which probes them again, was about a fifth of
// PostgreSQL's CPU per event of an append (BENCHMARKS.md).
var insertNewSQL = insertSQL(freshKeep(""))

// insertFreshSQL is the optimistic step for a batch that met the ledger:
// correlated LIMIT 1 probes of both unique indexes, like loadFactsSQL's,
// also leave out the events that conflict with a ledger row, so that the
// generic plan stays a nested loop of index probes whatever the size of
// the ledger. A concurrent append that committed the same (principal, key)
// or (poll, principal) after the probe makes a unique violation, which
// interpretError reports as errRaced, and the batch runs again.
var insertFreshSQL = insertSQL(freshKeep(`
      AND (SELECT 1 FROM poll_events k
           WHERE k.principal_id = i.principal_id AND k.client_event_id = i.client_event_id LIMIT 1) IS NULL
      AND (i.latest OR (SELECT 1 FROM poll_events a
                        WHERE a.poll_id = i.poll_id AND a.principal_id = i.principal_id AND NOT a.latest LIMIT 1) IS NULL)`))

// insertFresh is the optimistic step: insertNewSQL under a savepoint, and
// insertFreshSQL after rolling back to it if a ledger row was in the way
// (a redelivered entry, or a principal that answered before). The
// savepoint and the insert go in one round trip (a pgx.Batch). The
// savepoint stays open to the commit: releasing it would cost a round trip
// and change nothing.
func insertFresh(ctx context.Context, tx pgx.Tx, in appendInput, idx []int) (map[int]int64, error) {
	if len(idx) == 0 {
		return nil, nil
	}
	args, byKey := insertArgs(in, idx)
	var seqs map[int]int64
	var b pgx.Batch
	b.Queue("SAVEPOINT append_new")
	b.Queue(insertNewSQL, args...).Query(func(rows pgx.Rows) error {
		var err error
		seqs, err = readSeqs(rows, byKey)
		return err
	})
	err := interpretError("append batch: insert events", tx.SendBatch(ctx, &b).Close())
	if !errors.Is(err, errRaced) {
		return seqs, err
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT append_new"); err != nil {
		return nil, interpretError("append batch: roll back to savepoint", err)
	}
	return insertEvents(ctx, tx, insertFreshSQL, in, idx)
}

// insertEventsSQL is the full rules' insert, of every event it is given.
// It is a plain INSERT, not ON CONFLICT DO NOTHING: the facts read before
// it already showed every key and (poll, principal) free, so a unique
// violation can only come from a concurrent transaction that committed
// the same key in between, which interpretError reports as errRaced.
var insertEventsSQL = insertSQL(`
    SELECT * FROM input`)

// appendInput is a batch as the statements take it: the events, their
// fingerprints and, for each, whether it carries a ballot its poll's rules
// take, and that ballot read (readBallots).
type appendInput struct {
	events   []Event
	fps      [][32]byte
	ballotOK []bool
	ballots  []vote.Ballot // where ballotOK
	latest   []bool        // its poll's answers are latest
}

// insertEvents inserts events[idx] and returns the seq of each one
// inserted, by index. An index missing from the map was left out.
func insertEvents(ctx context.Context, tx pgx.Tx, sql string, in appendInput, idx []int) (map[int]int64, error) {
	if len(idx) == 0 {
		return nil, nil
	}
	args, byKey := insertArgs(in, idx)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, interpretError("append batch: insert events", err)
	}
	seqs, err := readSeqs(rows, byKey)
	if err != nil {
		return nil, interpretError("append batch: insert events", err)
	}
	return seqs, nil
}

// insertArgs are the arguments of insertSQL's statements for events[idx],
// and the index of each event by its key.
func insertArgs(in appendInput, idx []int) ([]any, map[keyOf]int) {
	n := len(idx)
	principals, keys, polls, candidates := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	fpb := make([][]byte, n)
	received := make([]time.Time, n)
	ballots, ok, latest := make([]*string, n), make([]bool, n), make([]bool, n)
	byKey := make(map[keyOf]int, n)
	for j, i := range idx {
		e := &in.events[i]
		principals[j], keys[j], polls[j], candidates[j], received[j] = e.PrincipalID, e.ClientEventID, e.PollID, e.CandidateID, e.ReceivedAt
		if e.Ballot != "" {
			ballots[j] = &e.Ballot
		}
		ok[j], latest[j] = in.ballotOK[i], in.latest[i]
		fpb[j] = in.fps[i][:]
		byKey[keyOf{e.PrincipalID, e.ClientEventID}] = i
	}
	return []any{principals, keys, polls, candidates, fpb, received, ballots, ok, latest}, byKey
}

// readSeqs reads what insertSQL's statements return: the seq of each row
// inserted, by the index of its event in byKey.
func readSeqs(rows pgx.Rows, byKey map[keyOf]int) (map[int]int64, error) {
	seqs := make(map[int]int64, len(byKey))
	var p, k string
	var seq int64
	_, err := pgx.ForEachRow(rows, []any{&p, &k, &seq}, func() error {
		seqs[byKey[keyOf{p, k}]] = seq
		return nil
	})
	return seqs, err
}

const insertRejectionsSQL = `
INSERT INTO poll_event_rejections (principal_id, client_event_id, poll_id, candidate_id, fingerprint, reason, received_at, ballot)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::timestamptz[], $8::text[])
ORDER BY 1, 2
ON CONFLICT DO NOTHING`

// insertRejections records rejections, once per (principal, client key):
// the first of a key in the batch wins, and a key already recorded keeps
// its record.
func insertRejections(ctx context.Context, tx pgx.Tx, rs []rejection) error {
	if len(rs) == 0 {
		return nil
	}
	seen := make(map[keyOf]bool, len(rs))
	var principals, keys, polls, candidates, reasons []string
	var fpb [][]byte
	var received []time.Time
	var ballots []*string
	for i := range rs {
		r := &rs[i]
		k := keyOf{r.e.PrincipalID, r.e.ClientEventID}
		if seen[k] {
			continue
		}
		seen[k] = true
		principals = append(principals, r.e.PrincipalID)
		keys = append(keys, r.e.ClientEventID)
		polls = append(polls, r.e.PollID)
		candidates = append(candidates, r.e.CandidateID)
		fpb = append(fpb, r.fp[:])
		reasons = append(reasons, string(r.reason))
		received = append(received, r.e.ReceivedAt)
		var b *string
		if r.e.Ballot != "" {
			b = &r.e.Ballot
		}
		ballots = append(ballots, b)
	}
	_, err := tx.Exec(ctx, insertRejectionsSQL, principals, keys, polls, candidates, fpb, reasons, received, ballots)
	return interpretError("append batch: record rejections", err)
}
