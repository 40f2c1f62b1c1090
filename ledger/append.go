package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"tally/vote"
)

// Event is one vote to append: the authenticated principal, the client's
// idempotency key (scoped to the principal), the choice, and when intake
// received it.
type Event struct {
	PrincipalID   string
	ClientEventID string
	PollID        string
	CandidateID   string
	ReceivedAt    time.Time
}

// Status is where an event stands.
type Status string

// The statuses of DESIGN.md's outcomes table. Append returns the last three;
// pending is for events still on their way to the ledger.
const (
	StatusPending   Status = "pending"
	StatusRecorded  Status = "recorded"
	StatusDuplicate Status = "duplicate"
	StatusRejected  Status = "rejected"
)

// Reason says why an event was rejected.
type Reason string

// Reasons for a rejection. unknown_poll and not_eligible catch events that
// intake refuses up front (404, 403) but that can still reach the ledger
// through import or a catalog change while the event waited in the stream.
const (
	ReasonAlreadyResponded Reason = "already_responded"
	ReasonKeyReused        Reason = "key_reused"
	ReasonPollClosed       Reason = "poll_closed"
	ReasonInvalidChoice    Reason = "invalid_choice"
	ReasonUnknownPoll      Reason = "unknown_poll"
	ReasonNotEligible      Reason = "not_eligible"
)

// Outcome is what Append did with one event.
type Outcome struct {
	Status Status
	Reason Reason // set when Status is rejected
	Seq    int64  // the ledger row's sequence when Status is recorded or duplicate
}

func (o Outcome) String() string {
	if o.Status == StatusRejected {
		return string(o.Status) + ": " + string(o.Reason)
	}
	return string(o.Status)
}

// InvalidEventError reports an event Append refused to look at: a malformed
// id or a missing receive time. Nothing of its batch was applied.
type InvalidEventError struct {
	Index int // position in the batch
	Field string
	Value string
}

func (e *InvalidEventError) Error() string {
	return fmt.Sprintf("event %d: %s %q is invalid: ids are "+vote.IDRule+" and received_at must be set", e.Index, e.Field, e.Value)
}

func (e *InvalidEventError) Unwrap() error { return ErrInvalid }

func validateEvent(i int, e Event) error {
	for _, f := range []struct{ name, v string }{
		{"principal_id", e.PrincipalID},
		{"event_id", e.ClientEventID},
		{"poll_id", e.PollID},
		{"candidate_id", e.CandidateID},
	} {
		if !vote.ValidID(f.v) {
			return &InvalidEventError{Index: i, Field: f.name, Value: f.v}
		}
	}
	if e.ReceivedAt.IsZero() {
		return &InvalidEventError{Index: i, Field: "received_at", Value: ""}
	}
	return nil
}

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
	err := s.runTx(ctx, "append batch", pgx.TxOptions{}, func(tx pgx.Tx) error {
		var err error
		outcomes, err = appendTx(ctx, tx, events, !s.fullPathOnly)
		return err
	})
	if err != nil {
		return nil, err
	}
	return outcomes, nil
}

type keyOf struct{ principal, key string }
type pollPrincipal struct{ poll, principal string }

// owner is what holds a (principal, client key): a ledger row or a
// rejection record, with the payload it was made with and the outcome an
// exact replay gets.
type owner struct {
	fp     [32]byte
	replay Outcome
}

// facts are what the database knows about one event before it is applied.
type facts struct {
	loaded                                      bool // read for this event: the first of its key in the batch
	pollExists, pollOpen, choiceValid, eligible bool
	keySeq                                      *int64 // ledger row with the same (principal, key)
	keyFP                                       [32]byte
	rejReason                                   *string // rejection record with the same (principal, key)
	rejFP                                       [32]byte
	answeredSeq                                 *int64 // ledger row with the same (poll, principal)
}

type rejection struct {
	e      Event
	fp     [32]byte
	reason Reason
}

// errRaced: a concurrent transaction committed a row this batch meant to
// insert, between this batch's read of the facts and its insert. The
// transaction is rolled back and run again, and then sees that row.
var errRaced = errors.New("a concurrent append inserted the same key first")

// appendTx classifies and applies events inside tx, in two steps.
//
// First, when fast is set, the optimistic step: the events that are the
// first of their key and of their (poll, principal) in the batch go to the
// ledger in one INSERT ... ON CONFLICT DO NOTHING that keeps only events
// valid by the catalog (poll known, open at received_at, choice offered,
// open to any principal) and whose key has no rejection record. Every row it
// inserts is an event the full rules would record: nothing in the database
// or earlier in the batch claimed its key or its (poll, principal). In the
// common case, a batch of new events, that one statement is the whole
// append.
//
// Then the full rules, for every event the first step did not record. They
// read the facts of those events (which now include the rows the first step
// inserted), classify them in batch order against those facts and what the
// batch itself claims, insert the new ledger rows (with the projection
// deltas in the same statement), and record the rejections. No event the
// first step left out could have claimed what an event it inserted took:
// such an event is either a repeat of a key (it claims nothing), invalid by
// the catalog (it claims nothing), or its (poll, principal) came first in
// the batch, and then the event inserted would have been left out instead.
// When a concurrent transaction pre-empted one of the second step's inserts
// (a unique violation), the classification of the whole batch is void:
// appendTx returns errRaced and runTx starts over.
func appendTx(ctx context.Context, tx pgx.Tx, events []Event, fast bool) ([]Outcome, error) {
	outcomes := make([]Outcome, len(events))
	fps := make([][32]byte, len(events))
	for i, e := range events {
		fps[i] = vote.Fingerprint(e.PollID, e.CandidateID)
	}
	rest := make([]int, 0, len(events))
	if fast {
		seqs, err := insertEvents(ctx, tx, insertFreshSQL, events, fps, freshEvents(events))
		if err != nil {
			return nil, err
		}
		for i := range events {
			if seq, ok := seqs[i]; ok {
				outcomes[i] = Outcome{Status: StatusRecorded, Seq: seq}
			} else {
				rest = append(rest, i)
			}
		}
	} else {
		for i := range events {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		return outcomes, nil
	}
	if err := classify(ctx, tx, events, fps, rest, outcomes); err != nil {
		return nil, err
	}
	return outcomes, nil
}

// freshEvents returns the index of every event that is the first of its
// (principal, key) and of its (poll, principal) in the batch.
func freshEvents(events []Event) []int {
	keys := make(map[keyOf]bool, len(events))
	answers := make(map[pollPrincipal]bool, len(events))
	fresh := make([]int, 0, len(events))
	for i, e := range events {
		k, pp := keyOf{e.PrincipalID, e.ClientEventID}, pollPrincipal{e.PollID, e.PrincipalID}
		if !keys[k] && !answers[pp] {
			fresh = append(fresh, i)
		}
		keys[k], answers[pp] = true, true
	}
	return fresh
}

// classify applies the full rules to events[idx] (in batch order) and
// fills in their outcomes.
func classify(ctx context.Context, tx pgx.Tx, events []Event, fps [][32]byte, idx []int, outcomes []Outcome) error {
	var primaries []int // the first event of each (principal, key)
	seen := make(map[keyOf]bool, len(idx))
	for _, i := range idx {
		k := keyOf{events[i].PrincipalID, events[i].ClientEventID}
		if !seen[k] {
			seen[k] = true
			primaries = append(primaries, i)
		}
	}
	fs, err := loadFacts(ctx, tx, events, primaries)
	if err != nil {
		return err
	}
	owners := make(map[keyOf]owner, len(primaries))
	claimed := make(map[pollPrincipal]bool, len(primaries))
	var inserts []int
	var rejections []rejection
	for _, i := range idx {
		e := events[i]
		k := keyOf{e.PrincipalID, e.ClientEventID}
		f := &fs[i]
		primary := f.loaded
		if primary {
			// The database's record of the key, if any, owns it.
			switch {
			case f.keySeq != nil:
				owners[k] = owner{fp: f.keyFP, replay: Outcome{Status: StatusDuplicate, Seq: *f.keySeq}}
			case f.rejReason != nil:
				owners[k] = owner{fp: f.rejFP, replay: Outcome{Status: StatusRejected, Reason: Reason(*f.rejReason)}}
			}
		}
		if o, owned := owners[k]; owned {
			if o.fp == fps[i] {
				outcomes[i] = o.replay
			} else {
				outcomes[i] = Outcome{Status: StatusRejected, Reason: ReasonKeyReused}
				rejections = append(rejections, rejection{e, fps[i], ReasonKeyReused})
			}
			continue
		}
		pp := pollPrincipal{e.PollID, e.PrincipalID}
		var reason Reason
		switch {
		case !f.pollExists:
			reason = ReasonUnknownPoll
		case !f.pollOpen:
			reason = ReasonPollClosed
		case !f.choiceValid:
			reason = ReasonInvalidChoice
		case !f.eligible:
			reason = ReasonNotEligible
		case f.answeredSeq != nil || claimed[pp]:
			reason = ReasonAlreadyResponded
		}
		if reason != "" {
			outcomes[i] = Outcome{Status: StatusRejected, Reason: reason}
			rejections = append(rejections, rejection{e, fps[i], reason})
			owners[k] = owner{fp: fps[i], replay: outcomes[i]}
			continue
		}
		claimed[pp] = true
		inserts = append(inserts, i)
		outcomes[i] = Outcome{Status: StatusRecorded}
		owners[k] = owner{fp: fps[i], replay: Outcome{Status: StatusDuplicate}} // Seq set below
	}
	seqs, err := insertEvents(ctx, tx, insertEventsSQL, events, fps, inserts)
	if err != nil {
		return err
	}
	if len(seqs) != len(inserts) {
		return errRaced
	}
	for _, i := range inserts {
		outcomes[i].Seq = seqs[i]
		k := keyOf{events[i].PrincipalID, events[i].ClientEventID}
		o := owners[k]
		o.replay.Seq = seqs[i]
		owners[k] = o
	}
	// Exact repeats of an event inserted here are its duplicates.
	for _, i := range idx {
		if outcomes[i].Status == StatusDuplicate && outcomes[i].Seq == 0 {
			outcomes[i].Seq = owners[keyOf{events[i].PrincipalID, events[i].ClientEventID}].replay.Seq
		}
	}
	return insertRejections(ctx, tx, rejections)
}

// loadFactsSQL reads, for each event, what decides its outcome. Each
// lookup is a correlated subquery on a unique index (LIMIT 1 keeps the
// planner from flattening it into a join), so the plan is a nested loop of
// index probes whatever the batch size, and PostgreSQL's generic plan of
// the prepared statement is as good as a custom one: no planning per batch.
const loadFactsSQL = `
SELECT i.ord,
       p.id IS NOT NULL,
       coalesce(p.opens_at <= i.received_at AND (p.closes_at IS NULL OR i.received_at < p.closes_at), false),
       EXISTS (SELECT 1 FROM poll_choices c WHERE c.poll_id = i.poll_id AND c.candidate_id = i.candidate_id),
       coalesce(p.eligibility = 'any', false)
           OR EXISTS (SELECT 1 FROM poll_eligible el WHERE el.poll_id = i.poll_id AND el.principal_id = i.principal_id),
       k.seq, k.fingerprint,
       r.reason, r.fingerprint,
       (SELECT a.seq FROM poll_events a WHERE a.poll_id = i.poll_id AND a.principal_id = i.principal_id LIMIT 1)
FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
       AS i(ord, principal_id, client_event_id, poll_id, candidate_id, received_at)
LEFT JOIN LATERAL (SELECT seq, fingerprint FROM poll_events
                   WHERE principal_id = i.principal_id AND client_event_id = i.client_event_id LIMIT 1) k ON true
LEFT JOIN LATERAL (SELECT reason, fingerprint FROM poll_event_rejections
                   WHERE principal_id = i.principal_id AND client_event_id = i.client_event_id LIMIT 1) r ON true
LEFT JOIN LATERAL (SELECT id, opens_at, closes_at, eligibility FROM polls WHERE id = i.poll_id LIMIT 1) p ON true`

// loadFacts returns the facts of events[idx], by index into events; the
// others are not loaded.
func loadFacts(ctx context.Context, tx pgx.Tx, events []Event, idx []int) ([]facts, error) {
	n := len(idx)
	ords := make([]int32, n)
	principals, keys, polls, candidates := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	received := make([]time.Time, n)
	for j, i := range idx {
		e := events[i]
		ords[j] = int32(i)
		principals[j], keys[j], polls[j], candidates[j], received[j] = e.PrincipalID, e.ClientEventID, e.PollID, e.CandidateID, e.ReceivedAt
	}
	rows, err := tx.Query(ctx, loadFactsSQL, ords, principals, keys, polls, candidates, received)
	if err != nil {
		return nil, interpretError("append batch: load facts", err)
	}
	defer rows.Close()
	out := make([]facts, len(events))
	for rows.Next() {
		var (
			ord          int32
			f            facts
			keyFP, rejFP []byte
		)
		if err := rows.Scan(&ord, &f.pollExists, &f.pollOpen, &f.choiceValid, &f.eligible,
			&f.keySeq, &keyFP, &f.rejReason, &rejFP, &f.answeredSeq); err != nil {
			return nil, interpretError("append batch: load facts", err)
		}
		if f.keyFP, err = fixedFingerprint(keyFP); err != nil {
			return nil, err
		}
		if f.rejFP, err = fixedFingerprint(rejFP); err != nil {
			return nil, err
		}
		if ord < 0 || int(ord) >= len(out) {
			return nil, fmt.Errorf("append batch: load facts: row for event %d of %d", ord, len(out))
		}
		f.loaded = true
		out[ord] = f
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("append batch: load facts", err)
	}
	return out, nil
}

func fixedFingerprint(b []byte) ([32]byte, error) {
	if b == nil {
		return [32]byte{}, nil
	}
	if len(b) != 32 {
		return [32]byte{}, fmt.Errorf("append batch: a stored fingerprint has %d bytes, want 32", len(b))
	}
	return [32]byte(b), nil
}

// insertSQL appends ledger rows chosen from the batch by selectRows and,
// in the same statement, adds them to the projection, per (poll,
// candidate) in a fixed order. Rows are inserted in principal order so two
// batches meet on the unique indexes in the same order.
func insertSQL(selectRows, onConflict string) string {
	return `
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::timestamptz[])
        AS i(principal_id, client_event_id, poll_id, candidate_id, fingerprint, received_at)
), ins AS (
    INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
    ` + selectRows + `
    ORDER BY i.principal_id, i.poll_id, i.client_event_id
    ` + onConflict + `
    RETURNING seq, principal_id, client_event_id, poll_id, candidate_id
), proj AS (
    INSERT INTO poll_results AS r (poll_id, candidate_id, vote_count)
    SELECT poll_id, candidate_id, count(*) FROM ins
    GROUP BY poll_id, candidate_id ORDER BY poll_id, candidate_id
    ON CONFLICT (poll_id, candidate_id) DO UPDATE SET vote_count = r.vote_count + EXCLUDED.vote_count
)
SELECT principal_id, client_event_id, seq FROM ins`
}

// insertFreshSQL is the optimistic step of appendTx: it inserts the events
// that are valid by the catalog, whose key has no rejection record, and
// that conflict with no ledger row (ON CONFLICT DO NOTHING with no target
// covers both unique indexes; a row a concurrent transaction holds is
// waited for, then skipped if it committed). It is stricter than the full
// rules, never looser: an event it skips gets the full rules. The lookups
// are correlated LIMIT 1 subqueries, like loadFactsSQL's, so the generic
// plan stays a nested loop of index probes.
//
// Tried and measured (batches of 1000, one writer, alternating arms):
// ON CONFLICT's speculative insertion costs about 30% of this statement,
// but replacing it with NOT EXISTS probes and a plain INSERT did not pay.
// As anti-joins they were 7% faster on an analyzed 1M-row ledger, yet the
// generic plan made while the ledger was small became a hash anti-join
// over a sequential scan of it (appends fell 20% below the full rules);
// as LIMIT 1 subqueries they were no faster than ON CONFLICT.
var insertFreshSQL = insertSQL(`
    SELECT i.poll_id, i.candidate_id, i.principal_id, i.client_event_id, i.fingerprint, i.received_at
    FROM input i
    CROSS JOIN LATERAL (SELECT opens_at, closes_at, eligibility FROM polls WHERE id = i.poll_id LIMIT 1) p
    WHERE p.eligibility = 'any'
      AND p.opens_at <= i.received_at AND (p.closes_at IS NULL OR i.received_at < p.closes_at)
      AND EXISTS (SELECT 1 FROM poll_choices c WHERE c.poll_id = i.poll_id AND c.candidate_id = i.candidate_id)
      AND NOT EXISTS (SELECT 1 FROM poll_event_rejections r
                      WHERE r.principal_id = i.principal_id AND r.client_event_id = i.client_event_id)`,
	`ON CONFLICT DO NOTHING`)

// insertEventsSQL is the full rules' insert. It is a plain INSERT, not ON
// CONFLICT DO NOTHING: the facts read before it already showed every key
// and (poll, principal) free, so a unique violation can only come from a
// concurrent transaction that committed the same key in between, and
// insertEvents reports it as errRaced.
var insertEventsSQL = insertSQL(`
    SELECT i.poll_id, i.candidate_id, i.principal_id, i.client_event_id, i.fingerprint, i.received_at
    FROM input i`, ``)

// insertEvents inserts events[idx] and returns the seq of each one inserted,
// by index. An index missing from the map lost a race to a concurrent
// transaction.
func insertEvents(ctx context.Context, tx pgx.Tx, sql string, events []Event, fps [][32]byte, idx []int) (map[int]int64, error) {
	if len(idx) == 0 {
		return nil, nil
	}
	n := len(idx)
	principals, keys, polls, candidates := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	fpb := make([][]byte, n)
	received := make([]time.Time, n)
	byKey := make(map[keyOf]int, n)
	for j, i := range idx {
		e := events[i]
		principals[j], keys[j], polls[j], candidates[j], received[j] = e.PrincipalID, e.ClientEventID, e.PollID, e.CandidateID, e.ReceivedAt
		fpb[j] = fps[i][:]
		byKey[keyOf{e.PrincipalID, e.ClientEventID}] = i
	}
	rows, err := tx.Query(ctx, sql, principals, keys, polls, candidates, fpb, received)
	if err != nil {
		return nil, insertError(err)
	}
	seqs := make(map[int]int64, n)
	var p, k string
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&p, &k, &seq}, func() error {
		seqs[byKey[keyOf{p, k}]] = seq
		return nil
	})
	if err != nil {
		return nil, insertError(err)
	}
	return seqs, nil
}

// insertError reports a unique violation on the ledger's keys as errRaced:
// the batch never inserts a key twice itself (appendTx claims each key and
// each (poll, principal) once), so another transaction got there first.
func insertError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == codeUniqueViolation && pgErr.TableName == "poll_events" {
		return errRaced
	}
	return interpretError("append batch: insert events", err)
}

const insertRejectionsSQL = `
INSERT INTO poll_event_rejections (principal_id, client_event_id, poll_id, candidate_id, fingerprint, reason, received_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::timestamptz[])
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
	}
	_, err := tx.Exec(ctx, insertRejectionsSQL, principals, keys, polls, candidates, fpb, reasons, received)
	return interpretError("append batch: record rejections", err)
}
