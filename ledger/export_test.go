package ledger

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
)

// FullPathOnly turns off Append's optimistic step on s, so tests can hold
// both ways through appendTx to the same rules.
func FullPathOnly(s *Store) { s.fullPathOnly = true }

// LeavesAfterRows makes the rebuild's reader beside its pass read the
// leaves only once the pass asks for them, which it does when it has
// taken every row (or passHeldForLeaves of them): every row waits for its
// leaf, as the rows that come before the leaves do.
func LeavesAfterRows(s *Store) { s.leavesAfterRows = true }

// LatestInSQL makes the rebuild read the last ballots of every poll of
// answers latest with latestSQL, as Repair does, rather than keep them
// in its pass.
func LatestInSQL(s *Store) { s.latestInSQL = true }

// OnePassPolls are the polls the rebuild's one pass over the ledger hashes
// (log_pass.go), in a snapshot of their own, with the reader beside it as
// Rebuild has it; the others go to the per-poll check.
func OnePassPolls(ctx context.Context, s *Store) ([]string, error) {
	var out []string
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, logHeadsSQL, nil)
		if err != nil {
			return err
		}
		heads, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (logHeadRow, error) {
			var h logHeadRow
			return h, r.Scan(&h.poll, &h.size, &h.root, &h.partial)
		})
		if err != nil {
			return err
		}
		polls := newPassPolls(heads, nil)
		side, err := s.tilesBeside(ctx, tx, nil, polls)
		if err != nil {
			return err
		}
		defer side.stop()
		passed, _, err := hashInOnePass(ctx, tx, polls, "", side)
		for id := range passed {
			out = append(out, id)
		}
		return err
	})
	slices.Sort(out)
	return out, err
}
