package ledger

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// FullPathOnly turns off Append's optimistic step on s, so tests can hold
// both ways through appendTx to the same rules.
func FullPathOnly(s *Store) { s.fullPathOnly = true }

// OnePassPolls are the polls the rebuild's one pass over the ledger hashes
// (log_pass.go), in a snapshot of their own; the others go to the
// per-poll check.
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
		passed, _, err := hashInOnePass(ctx, tx, heads, "")
		for id := range passed {
			out = append(out, id)
		}
		return err
	})
	slices.Sort(out)
	return out, err
}

// TilesDigestAgrees reports whether the digest PostgreSQL makes of poll's
// stored full tiles is the one of the tiles the one pass makes of its
// rows, so that the rebuild reads no tile of an honest log.
func TilesDigestAgrees(ctx context.Context, s *Store, poll string) (bool, error) {
	var agrees bool
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, logHeadsSQL, poll)
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
		passed, _, err := hashInOnePass(ctx, tx, heads, poll)
		if err != nil || passed[poll] == nil {
			return fmt.Errorf("poll %s not hashed in the one pass (%v)", poll, err)
		}
		var stored []byte
		if err := tx.QueryRow(ctx, tilesDigestSQL, poll).Scan(&stored); err != nil {
			return err
		}
		agrees = len(passed[poll].full) > 0 && bytes.Equal(stored, tilesDigest(passed[poll].full))
		return nil
	})
	return agrees, err
}
