package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// This file owns the reading of the catalog's change log (catalog_changes,
// migration 00015): the polls, principals and credential keys whose
// catalog entries changed, one row each per transaction, numbered in
// commit order by the database's triggers. A cache of the catalog loads it
// whole once (CatalogHorizon, then PollsAfter and Revocations), and from
// then on applies only the changes after the last one it applied
// (CatalogChangesAfter), reading again the entries they name (PollsOf,
// RevocationsOf).

// The kinds of a catalog change: what its Target names.
const (
	ChangePoll      = "poll"      // a poll, its choices or its eligibility list
	ChangePrincipal = "principal" // a principal revoked (or its row otherwise changed)
	ChangeKey       = "key"       // a credential key retired
)

// CatalogChange is one entry of the catalog's change log.
type CatalogChange struct {
	Seq    int64
	Kind   string // ChangePoll, ChangePrincipal or ChangeKey
	Target string // the poll, principal or key id
}

// The errors of CatalogChangesAfter after which the cache that asked must
// load the catalog whole.
var (
	// ErrChangesTrimmed: changes after the seq asked for were trimmed from
	// the log; the cache fell behind.
	ErrChangesTrimmed = errors.New("the catalog's change log was trimmed past the last change applied")
	// ErrChangesRewound: the log ends before the seq asked for, which it
	// once held: the database was restored from a backup, or failed over
	// to a standby that had not received the last changes. Changes made
	// since may reuse the seqs the cache applied.
	ErrChangesRewound = errors.New("the catalog's change log ends before the last change applied (a database restored or failed over)")
)

// catalogChangesAfterSQL reads the trim horizon, the last seq and the
// first changes after $1 in one statement: one row with NULLs when
// nothing changed, so a check that finds nothing costs two index probes.
const catalogChangesAfterSQL = `
SELECT t.through, (SELECT max(seq) FROM catalog_changes), c.seq, c.kind, c.target
FROM catalog_changes_trimmed t
LEFT JOIN LATERAL (SELECT seq, kind, target FROM catalog_changes WHERE seq > $1 ORDER BY seq LIMIT $2) c ON true`

// CatalogChangesAfter returns the changes after seq after, oldest first,
// at most limit of them; none when nothing changed since. Its error is
// ErrChangesTrimmed when some of them are no longer in the log, and
// ErrChangesRewound when the log ends before after.
func (s *Store) CatalogChangesAfter(ctx context.Context, after int64, limit int) ([]CatalogChange, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("read catalog changes: %w: the limit must be positive, not %d", ErrInvalid, limit)
	}
	rows, err := s.pool.Query(ctx, catalogChangesAfterSQL, after, limit)
	if err != nil {
		return nil, interpretError("read catalog changes", err)
	}
	var changes []CatalogChange
	var trimmed int64
	var last, seq *int64
	var kind, target *string
	_, err = pgx.ForEachRow(rows, []any{&trimmed, &last, &seq, &kind, &target}, func() error {
		if seq != nil {
			changes = append(changes, CatalogChange{Seq: *seq, Kind: *kind, Target: *target})
		}
		return nil
	})
	if err != nil {
		return nil, interpretError("read catalog changes", err)
	}
	if trimmed > after {
		return nil, fmt.Errorf("read catalog changes after %d: %w (through %d)", after, ErrChangesTrimmed, trimmed)
	}
	if end := max(trimmed, ptrOr(last, 0)); end < after {
		return nil, fmt.Errorf("read catalog changes after %d: %w (it ends at %d)", after, ErrChangesRewound, end)
	}
	return changes, nil
}

func ptrOr(p *int64, or int64) int64 {
	if p == nil {
		return or
	}
	return *p
}

// CatalogHorizon is the seq of the last change committed: a cache that
// reads the catalog whole after it, then applies the changes after it,
// misses none and ends current.
func (s *Store) CatalogHorizon(ctx context.Context) (int64, error) {
	var seq int64
	err := s.pool.QueryRow(ctx, `
SELECT greatest(t.through, (SELECT coalesce(max(seq), 0) FROM catalog_changes)) FROM catalog_changes_trimmed t`).Scan(&seq)
	return seq, interpretError("read the catalog's horizon", err)
}

// TrimCatalogChanges drops every change of the log but the last keep,
// as the database does by itself every 1,000th change (keeping 100,000).
func (s *Store) TrimCatalogChanges(ctx context.Context, keep int64) error {
	_, err := s.pool.Exec(ctx, `SELECT tally_trim_catalog_changes($1)`, keep)
	return interpretError("trim the catalog's change log", err)
}
