package ledger

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
)

// LedgerRow is one row of poll_events as Export reads it.
type LedgerRow struct {
	Seq           int64
	ClientEventID string
	PollID        string
	CandidateID   string
	Ballot        string // a ballot of another kind than single, canonical; CandidateID is empty then
	PrincipalID   string
	ReceivedAt    time.Time
	RecordedAt    time.Time
	LeafIndex     int64 // its leaf in its poll's log; -1: in none
	// Definition, when set, makes the row a definition leaf of its poll
	// (PollID, RecordedAt and LeafIndex set), not a ledger row.
	Definition *audit.Definition
}

// Event returns the row as an Event, the form Append takes back.
func (r LedgerRow) Event() Event {
	return Event{PrincipalID: r.PrincipalID, ClientEventID: r.ClientEventID, PollID: r.PollID,
		CandidateID: r.CandidateID, Ballot: r.Ballot, ReceivedAt: r.ReceivedAt}
}

// ExportRow is the row as an export line carries it (audit's form): the
// line tally export writes for it.
func (r LedgerRow) ExportRow() audit.ExportRow {
	row := audit.ExportRow{Seq: r.Seq, EventID: r.ClientEventID, PollID: r.PollID, CandidateID: r.CandidateID,
		Ballot: r.Ballot, PrincipalID: r.PrincipalID, ReceivedAt: r.ReceivedAt, RecordedAt: r.RecordedAt, Definition: r.Definition}
	if r.LeafIndex >= 0 {
		leaf := r.LeafIndex
		row.LeafIndex = &leaf
	}
	return row
}

// LeafHash is the hash of the row's leaf in its poll's log: its
// definition's, or its vote's.
func (r LedgerRow) LeafHash() (tlog.Hash, error) {
	if r.Definition != nil {
		return audit.DefinitionHash(*r.Definition)
	}
	return leafHash(r.Event())
}

// exportSQL walks the leaves in the order they were written (the id of
// poll_log_leaves), which is each poll's leaf order, definitions (a
// negative seq) among the rows, and then the rows in no leaf (a log still
// to build, or rows inserted outside an append), in seq order; and
// exportPollSQL the same of one poll, $1, whose rows in no leaf it finds
// through the poll's indexes (pollRowsOf), not by reading the whole
// ledger.
var exportSQL, exportPollSQL = exportStatement("TRUE", "TRUE", ""), exportStatement("l.poll_id = $1", pollRowsOf, "WHERE poll_id = $1")

// exportStatement is exportSQL with the conditions that choose the
// leaves, the rows and the leaves of the rows in no leaf.
func exportStatement(leaves, rows, leafRows string) string {
	return `
(SELECT s.seq, e.client_event_id, l.poll_id, e.candidate_id, e.ballot, e.principal_id, e.received_at, coalesce(e.recorded_at, d.recorded_at), l.first_leaf + s.ord - 1,
        ` + definitionCols + `
FROM poll_log_leaves l
CROSS JOIN LATERAL unnest(l.seqs) WITH ORDINALITY AS s(seq, ord)
LEFT JOIN poll_events e ON s.seq > 0 AND e.seq = s.seq AND e.poll_id = l.poll_id
LEFT JOIN poll_definitions d ON s.seq < 0 AND d.id = -s.seq AND d.poll_id = l.poll_id
WHERE ` + leaves + ` AND (e.seq IS NOT NULL OR d.id IS NOT NULL)
 ORDER BY l.id, s.ord)
UNION ALL
(SELECT e.seq, e.client_event_id, e.poll_id, e.candidate_id, e.ballot, e.principal_id, e.received_at, e.recorded_at, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
 FROM poll_events e
 LEFT JOIN (SELECT unnest(seqs) AS seq FROM poll_log_leaves ` + leafRows + `) l ON l.seq = e.seq
 WHERE ` + rows + ` AND l.seq IS NULL
 ORDER BY e.seq)`
}

// Export calls fn for every ledger row (one poll's when pollID is not
// empty), each poll's in its leaf order, from one snapshot: importing the
// rows in that order elsewhere reproduces every poll's log. Rows in no
// leaf come last, with LeafIndex -1. A poll's definitions come as rows
// with Definition set, at their leaves. It streams: memory does not grow
// with the ledger.
func (s *Store) Export(ctx context.Context, pollID string, fn func(LedgerRow) error) error {
	var (
		rows pgx.Rows
		err  error
	)
	if pollID == "" {
		rows, err = s.pool.Query(ctx, exportSQL)
	} else {
		rows, err = s.pool.Query(ctx, exportPollSQL, pollID)
	}
	if err != nil {
		return interpretError("export ledger", err)
	}
	var (
		r             LedgerRow
		leaf          *int64
		key, cand, pr *string
		ballot        *string
		received      *time.Time
		def           definitionRow
	)
	_, err = pgx.ForEachRow(rows, append([]any{&r.Seq, &key, &r.PollID, &cand, &ballot, &pr, &received, &r.RecordedAt, &leaf},
		def.targets()...),
		func() error {
			r.LeafIndex = -1
			if leaf != nil {
				r.LeafIndex = *leaf
			}
			if def.poll != nil {
				d := def.definition()
				r.Seq, r.Definition = 0, &d
				r.ClientEventID, r.CandidateID, r.Ballot, r.PrincipalID, r.ReceivedAt = "", "", "", "", time.Time{}
				return fn(r)
			}
			r.Definition = nil
			r.ClientEventID, r.CandidateID, r.Ballot, r.PrincipalID, r.ReceivedAt = *key, *cand, deref(ballot), *pr, *received
			return fn(r)
		})
	return interpretError("export ledger", err)
}
