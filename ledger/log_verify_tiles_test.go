package ledger_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/ledger"
)

// Rebuild reads the leaves and the stored tiles beside its pass, on a
// second connection in its snapshot, or, from a pool of one connection,
// everything in its own transaction: either way a changed or missing
// stored tile, a changed row or leaves put out of order are named,
// whether the other poll is named before p or after it, and whether the
// leaves are in before the first row or only after the last, and a poll
// left untouched verifies.
func TestRebuildComparesTilesReadEitherWay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		sql      string
		wantLeaf int64
		want     string
	}{
		{"changed tile", `UPDATE poll_log_tiles SET hashes = set_byte(hashes, 64, 255 - get_byte(hashes, 64)) WHERE poll_id = 'p' AND level = 0 AND idx = 2`, 34, "does not hash"},
		{"changed upper tile", `UPDATE poll_log_tiles SET hashes = set_byte(hashes, 96, 255 - get_byte(hashes, 96)) WHERE poll_id = 'p' AND level = 1 AND idx = 1`, 304, "tile 1/1 of the log differs"},
		{"missing tile", `DELETE FROM poll_log_tiles WHERE poll_id = 'p' AND level = 0 AND idx = 5`, 80, "tile 0/5 of the log is missing"},
		{"changed row", `UPDATE poll_events SET principal_id = 'mallory' WHERE seq = ` + leafSeq("p", 300), 300, "does not hash"},
		{"swapped rows", `UPDATE poll_log_leaves SET seqs = seqs[1:5] || seqs[7] || seqs[6] || seqs[8:] WHERE poll_id = 'p' AND first_leaf = 1`, 6, "does not hash"},
		{"deleted row", `DELETE FROM poll_events WHERE seq = ` + leafSeq("p", 77), 77, "missing"},
	} {
		for _, c := range []struct {
			conns int32
			other string
			late  bool // the leaves are read only once every row is
		}{{1, "q", false}, {4, "q", false}, {4, "a0", false}, {4, "q", true}} {
			t.Run(fmt.Sprintf("%s, a pool of %d, beside %s, leaves late %t", tc.name, c.conns, c.other, c.late), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.poll(t, "p", "a", "b")
				b.poll(t, c.other, "a", "b")
				for i := range 3 {
					batch := make([]ledger.Event, 200)
					for j := range batch {
						batch[j] = ev(fmt.Sprintf("u%d-%d", i, j), "k", "p", []string{"a", "b"}[j%2])
					}
					batch = append(batch, ev(fmt.Sprintf("v%d", i), "k", c.other, "a"))
					if _, err := b.store.Append(b.ctx, batch); err != nil {
						t.Fatal(err)
					}
				}
				tamper(t, b, tc.sql)
				store, _ := b.ownStore(t, func(cfg *pgxpool.Config) { cfg.MaxConns = c.conns })
				if c.late {
					// Every row waits for its leaf, and p's still go
					// through the pass unless one of them is gone.
					ledger.LeavesAfterRows(store)
					want := []string{"p", c.other}
					if strings.Contains(tc.name, "deleted") {
						want = want[1:]
					}
					if got, err := ledger.OnePassPolls(b.ctx, store); err != nil || !slices.Equal(got, want) {
						t.Fatalf("the one pass hashed %v (%v), want %v", got, err, want)
					}
				}
				rep, err := store.Rebuild(b.ctx, "")
				if err != nil {
					t.Fatal(err)
				}
				if rep.LogProblems != 1 {
					t.Fatalf("%d logs with problems, want 1: %+v", rep.LogProblems, rep.Logs)
				}
				for _, l := range rep.Logs {
					switch {
					case l.PollID == c.other && !l.OK():
						t.Errorf("untouched poll %s reported: %+v", c.other, l)
					case l.PollID == "p" && (l.Leaf != tc.wantLeaf || !strings.Contains(l.Problem, tc.want)):
						t.Errorf("poll p: leaf %d %q, want leaf %d and %q", l.Leaf, l.Problem, tc.wantLeaf, tc.want)
					}
				}
				// One poll's rebuild reads that poll's leaves and tiles only.
				if rep, err = store.Rebuild(b.ctx, c.other); err != nil || rep.LogProblems != 0 || len(rep.Logs) != 1 {
					t.Errorf("poll %s alone: %v, %+v", c.other, err, rep.Logs)
				}
			})
		}
	}
}
