package ledger_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/ledger"
)

// Rebuild reads the stored tiles beside its pass, on a second connection
// in its snapshot, or, from a pool of one connection, in its own
// transaction: either way a changed or missing stored tile is named, and
// a poll left untouched verifies.
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
	} {
		for _, conns := range []int32{1, 4} {
			t.Run(fmt.Sprintf("%s, a pool of %d", tc.name, conns), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.poll(t, "p", "a", "b")
				b.poll(t, "q", "a", "b")
				for i := range 3 {
					batch := make([]ledger.Event, 200)
					for j := range batch {
						batch[j] = ev(fmt.Sprintf("u%d-%d", i, j), "k", "p", []string{"a", "b"}[j%2])
					}
					batch = append(batch, ev(fmt.Sprintf("v%d", i), "k", "q", "a"))
					if _, err := b.store.Append(b.ctx, batch); err != nil {
						t.Fatal(err)
					}
				}
				tamper(t, b, tc.sql)
				cfg, err := pgxpool.ParseConfig(b.db.URL)
				if err != nil {
					t.Fatal(err)
				}
				cfg.MaxConns = conns
				pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				store, err := ledger.New(pool, ledger.Config{})
				if err != nil {
					t.Fatal(err)
				}
				rep, err := store.Rebuild(b.ctx, "")
				if err != nil {
					t.Fatal(err)
				}
				if rep.LogProblems != 1 {
					t.Fatalf("%d logs with problems, want 1: %+v", rep.LogProblems, rep.Logs)
				}
				for _, c := range rep.Logs {
					switch {
					case c.PollID == "q" && !c.OK():
						t.Errorf("untouched poll q reported: %+v", c)
					case c.PollID == "p" && (c.Leaf != tc.wantLeaf || !strings.Contains(c.Problem, tc.want)):
						t.Errorf("poll p: leaf %d %q, want leaf %d and %q", c.Leaf, c.Problem, tc.wantLeaf, tc.want)
					}
				}
				// One poll's rebuild reads that poll's tiles only.
				if rep, err = store.Rebuild(b.ctx, "q"); err != nil || rep.LogProblems != 0 || len(rep.Logs) != 1 {
					t.Errorf("poll q alone: %v, %+v", err, rep.Logs)
				}
			})
		}
	}
}
