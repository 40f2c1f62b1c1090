package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// This file owns the reading of the catalog's change log (catalog_changes,
// migration 00015): the polls, principals and credential keys whose
// catalog entries changed, one row each per transaction, numbered in
// commit order by the database's triggers. A cache of the catalog loads it
// whole once (CatalogHorizon, then PollsAfter and Revocations), and from
// then on applies only the changes after the last one it applied
// (CatalogChangesAfter, which reads the polls they name in the same
// statement), reading again the principals and keys they name
// (RevocationsOf).

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
// first changes after $1 in one statement (one row with NULLs when nothing
// changed, so a check that finds nothing costs a few index probes), and,
// on the row of each poll's last change in the page, the poll as the
// statement's snapshot holds it (pollColumnsSQL; NULLs when it no longer
// exists). The poll is read in a subquery of its own per change (LIMIT
// keeps PostgreSQL from joining it into a scan of every poll), and only
// for those rows.
const catalogChangesAfterSQL = `
WITH page AS (SELECT seq, kind, target FROM catalog_changes WHERE seq > $1 ORDER BY seq LIMIT $2),
ch AS (SELECT seq, kind, target, seq = max(seq) OVER (PARTITION BY kind, target) AS last FROM page)
SELECT (SELECT through FROM catalog_changes_trimmed), (SELECT max(seq) FROM catalog_changes), ch.seq, ch.kind, ch.target, p.*
FROM (VALUES (1)) one
LEFT JOIN ch ON true
LEFT JOIN LATERAL (SELECT ` + pollColumnsSQL + ` FROM polls p WHERE ch.last AND ch.kind = 'poll' AND p.id = ch.target LIMIT 1) p ON true
ORDER BY ch.seq`

// jitOffSQL turns JIT compilation off until the end of the transaction:
// sent in the pipeline of catalogChangesAfterSQL, whose implicit
// transaction ends at its Sync, it keeps PostgreSQL from compiling that
// statement (its cost is estimated from the eligibility lists' lengths,
// and a long one's estimate is past jit_above_cost: a compilation of
// hundreds of milliseconds for a read of a few), without a round trip of
// its own.
const jitOffSQL = `SELECT set_config('jit', 'off', true)`

// CatalogUpdate is a page of the catalog's change log with the polls its
// changes name, read in one snapshot.
type CatalogUpdate struct {
	Changes []CatalogChange // oldest first
	// Polls are the polls the changes of kind ChangePoll name, each once,
	// as they are in the snapshot the changes were read in (so with every
	// change of the page made); a poll named but absent no longer exists.
	Polls []Poll
}

// CatalogChangesAfter returns the changes after seq after, oldest first,
// at most limit of them (none when nothing changed since), with the polls
// they name: one statement, one round trip and one snapshot for what a
// cache applies. It reads no principal or key: RevocationsOf does. Its
// error is ErrChangesTrimmed when some of the changes are no longer in the
// log, and ErrChangesRewound when the log ends before after.
func (s *Store) CatalogChangesAfter(ctx context.Context, after int64, limit int) (CatalogUpdate, error) {
	if limit <= 0 {
		return CatalogUpdate{}, fmt.Errorf("read catalog changes: %w: the limit must be positive, not %d", ErrInvalid, limit)
	}
	var b pgx.Batch
	b.Queue(jitOffSQL)
	b.Queue(catalogChangesAfterSQL, after, limit)
	br := s.pool.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return CatalogUpdate{}, interpretError("read catalog changes", err)
	}
	rows, err := br.Query()
	if err != nil {
		return CatalogUpdate{}, interpretError("read catalog changes", err)
	}
	u, page, err := scanCatalogUpdate(rows)
	if err != nil {
		return CatalogUpdate{}, interpretError("read catalog changes", err)
	}
	if err := page.check(after); err != nil {
		return CatalogUpdate{}, err
	}
	return u, nil
}

// scanCatalogUpdate reads the rows of catalogChangesAfterSQL; its error
// is pgx's.
func scanCatalogUpdate(rows pgx.Rows) (CatalogUpdate, changesPage, error) {
	defer rows.Close()
	var u CatalogUpdate
	var page changesPage
	var pr pollRow
	changeOnly := slices.Concat(page.targets(), make([]any, len(pr.targets())))
	withPoll := slices.Concat(page.targets(), pr.targets())
	pollAt := len(page.targets()) // the poll's id: NULL when the row has no poll
	for rows.Next() {
		hasPoll := rows.RawValues()[pollAt] != nil
		targets := changeOnly
		if hasPoll {
			pr = pollRow{} // the slices scanned are the poll's own
			targets = withPoll
		}
		if err := rows.Scan(targets...); err != nil {
			return CatalogUpdate{}, page, err
		}
		if c, ok := page.change(); ok {
			u.Changes = append(u.Changes, c)
		}
		if hasPoll {
			u.Polls = append(u.Polls, pr.poll())
		}
	}
	return u, page, rows.Err()
}

// changesPage scans the columns catalogChangesAfterSQL begins with: the
// trim horizon, the last seq, and a change (NULLs for none).
type changesPage struct {
	trimmed      int64
	last, seq    *int64
	kind, target *string
}

func (p *changesPage) targets() []any {
	return []any{&p.trimmed, &p.last, &p.seq, &p.kind, &p.target}
}

// change is the row's change, if it has one.
func (p *changesPage) change() (CatalogChange, bool) {
	if p.seq == nil {
		return CatalogChange{}, false
	}
	return CatalogChange{Seq: *p.seq, Kind: *p.kind, Target: *p.target}, true
}

// check says whether a reader that applied every change up to after may
// apply the page: ErrChangesTrimmed or ErrChangesRewound when not.
func (p *changesPage) check(after int64) error {
	if p.trimmed > after {
		return fmt.Errorf("read catalog changes after %d: %w (through %d)", after, ErrChangesTrimmed, p.trimmed)
	}
	if end := max(p.trimmed, ptrOr(p.last, 0)); end < after {
		return fmt.Errorf("read catalog changes after %d: %w (it ends at %d)", after, ErrChangesRewound, end)
	}
	return nil
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
