package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// facts are what the database knows about one event before it is applied.
// Only the first event of each key in the batch has them; for the others
// they are zero.
type facts struct {
	pollExists, pollOpen, choiceValid, eligible bool
	ballot                                      bool   // the event is a ballot of another kind than single
	latest                                      bool   // its poll's answers are latest: answeredSeq does not count
	keySeq                                      *int64 // ledger row with the same (principal, key)
	keyFP                                       [32]byte
	rejReason                                   *string // rejection record with the same (principal, key)
	rejFP                                       [32]byte
	answeredSeq                                 *int64 // ledger row with the same (poll, principal)
}

// loadFactsSQL reads, for each event, what decides its outcome. Each
// lookup is a correlated subquery on a unique index (LIMIT 1 keeps the
// planner from flattening it into a join), so the plan is a nested loop of
// index probes whatever the batch size, and PostgreSQL's generic plan of
// the prepared statement is as good as a custom one: no planning per batch.
const loadFactsSQL = `
SELECT i.ord,
       p.id IS NOT NULL,
       coalesce(poll_open_at(p.opens_at, p.closes_at, i.received_at), false),
       i.ballot_ok OR coalesce(p.ballot_kind = 'single', false) AND NOT i.ballot
           AND EXISTS (SELECT 1 FROM poll_choices c WHERE c.poll_id = i.poll_id AND c.candidate_id = i.candidate_id),
       coalesce(p.eligibility = 'any', false)
           OR EXISTS (SELECT 1 FROM poll_eligible el WHERE el.poll_id = i.poll_id AND el.principal_id = i.principal_id),
       k.seq, k.fingerprint,
       r.reason, r.fingerprint,
       (SELECT a.seq FROM poll_events a WHERE a.poll_id = i.poll_id AND a.principal_id = i.principal_id AND NOT a.latest LIMIT 1)
FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::bool[], $8::bool[])
       AS i(ord, principal_id, client_event_id, poll_id, candidate_id, received_at, ballot, ballot_ok)
LEFT JOIN LATERAL (SELECT seq, fingerprint FROM poll_events
                   WHERE principal_id = i.principal_id AND client_event_id = i.client_event_id LIMIT 1) k ON true
LEFT JOIN LATERAL (SELECT reason, fingerprint FROM poll_event_rejections
                   WHERE principal_id = i.principal_id AND client_event_id = i.client_event_id LIMIT 1) r ON true
LEFT JOIN LATERAL (SELECT id, opens_at, closes_at, eligibility, ballot_kind FROM polls WHERE id = i.poll_id LIMIT 1) p ON true`

// loadFacts returns the facts of events[idx], by index into events; the
// others are not loaded.
func loadFacts(ctx context.Context, tx pgx.Tx, in appendInput, idx []int) ([]facts, error) {
	events := in.events
	n := len(idx)
	ords := make([]int32, n)
	principals, keys, polls, candidates := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	received := make([]time.Time, n)
	isBallot, ok := make([]bool, n), make([]bool, n)
	for j, i := range idx {
		e := events[i]
		ords[j] = int32(i)
		principals[j], keys[j], polls[j], candidates[j], received[j] = e.PrincipalID, e.ClientEventID, e.PollID, e.CandidateID, e.ReceivedAt
		isBallot[j], ok[j] = e.Ballot != "", in.ballotOK[i]
	}
	rows, err := tx.Query(ctx, loadFactsSQL, ords, principals, keys, polls, candidates, received, isBallot, ok)
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
		f.ballot, f.latest = events[ord].Ballot != "", in.latest[ord]
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
