package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"
	"golang.org/x/sync/errgroup"
)

// LogCheck is the rebuild's verdict on one poll's log: the ledger's rows
// hashed again, in leaf order, against the stored head and tiles.
type LogCheck struct {
	PollID string `json:"poll_id"`
	Size   int64  `json:"size"` // the stored head's
	Rows   int64  `json:"rows"` // the ledger's rows of the poll
	// Definitions are the leaves that are the poll's definition, not a
	// row: Size is Rows + Definitions in a log that verifies.
	Definitions int64 `json:"definitions"`
	// Leaf is the first leaf concerned by Problem, or -1.
	Leaf    int64  `json:"leaf"`
	Problem string `json:"problem,omitempty"` // "" when the log verifies
}

// OK reports whether the log verified.
func (c LogCheck) OK() bool { return c.Problem == "" }

const logHeadsSQL = `
SELECT poll_id, size, root, partial FROM poll_log_heads
WHERE $1::text IS NULL OR poll_id = $1 ORDER BY poll_id`

// verifyLogs checks the log of every poll (one when pollID is set) in tx's
// snapshot, and returns the recount its pass made beside the checks, and
// of each poll in latest (of answers latest) it hashed whole, its
// principals' last answers in leaf order by answer (not of a poll of more
// principals than maxLastHeld). The checks: the
// leaves are dense and each is a row of the poll, every row of the poll
// is a leaf, the rows hash to the stored root, the stored tiles are the
// rows' (the first differing hash names the leaf), and each row's
// fingerprint is its poll's and candidate's. A head still to build (rows
// from before the log) is reported as such.
//
// Every poll's rows are first hashed in one pass over the ledger
// (log_pass.go), while a second connection in tx's snapshot reads half of
// the polls' leaves and then every stored tile (log_verify_tiles.go),
// which each poll's hasher compares once it is done. A poll the pass
// cannot hash (its leaves do not line up
// with its rows: something is wrong with it) is then checked the per-poll
// way, which names its first wrong leaf: several polls at a time, each on
// a connection of the pool whose transaction imports tx's snapshot
// (pg_export_snapshot, as pg_dump shares one among its workers), so every
// poll is checked in the same state of the ledger as the recount: as many
// at once as the process has cores, leaving one of the pool's connections
// to tx.
func (s *Store) verifyLogs(ctx context.Context, tx pgx.Tx, pollID string, latest map[string]bool) ([]LogCheck, map[tallyKey]int64, map[string]map[string]int64, error) {
	p := optional(pollID)
	rows, err := tx.Query(ctx, logHeadsSQL, p)
	if err != nil {
		return nil, nil, nil, err
	}
	heads, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (logHeadRow, error) {
		var h logHeadRow
		return h, r.Scan(&h.poll, &h.size, &h.root, &h.partial)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	out := make([]LogCheck, len(heads))
	polls := newPassPolls(heads, latest)
	ahead, err := s.tilesBeside(ctx, tx, p, polls)
	if err != nil {
		return nil, nil, nil, err
	}
	defer ahead.stop()
	passed, counts, err := hashInOnePass(ctx, tx, polls, pollID, ahead)
	if err != nil {
		return nil, nil, nil, err
	}
	tiles, err := ahead.wait(tx)
	if err != nil {
		return nil, nil, nil, err
	}
	var rest []int // the heads left to the per-poll check
	last := map[string]map[string]int64{}
	for i, h := range heads {
		hh := passed[h.poll]
		if hh == nil {
			rest = append(rest, i)
			continue
		}
		if hh.last != nil {
			last[h.poll] = hh.last
		}
		if out[i], err = checkLog(ctx, tx, tiles, LogCheck{PollID: h.poll, Size: h.size, Leaf: -1}, *hh, h.root, h.partial); err != nil {
			return nil, nil, nil, err
		}
	}
	if err := s.verifyEach(ctx, tx, heads, rest, out); err != nil {
		return nil, nil, nil, err
	}
	return out, counts, last, nil
}

// verifyEach checks the logs of heads[i] for each i in rest the per-poll
// way into out[i]: in tx, or, when the pool allows two or more, by as many
// workers as there are cores, each in its own transaction on tx's
// exported snapshot.
func (s *Store) verifyEach(ctx context.Context, tx pgx.Tx, heads []logHeadRow, rest []int, out []LogCheck) error {
	workers := min(len(rest), runtime.GOMAXPROCS(0), int(s.pool.Config().MaxConns)-1)
	if workers < 2 {
		for _, i := range rest {
			h := heads[i]
			var err error
			if out[i], err = verifyLog(ctx, tx, h.poll, h.size, h.root, h.partial); err != nil {
				return err
			}
		}
		return nil
	}
	snapshot, err := exportSnapshot(ctx, tx, "the logs' workers")
	if err != nil {
		return err
	}
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			return pgx.BeginTxFunc(gctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(wtx pgx.Tx) error {
				if err := importSnapshot(gctx, wtx, snapshot); err != nil {
					return err
				}
				for {
					j := int(next.Add(1)) - 1
					if j >= len(rest) {
						return nil
					}
					i := rest[j]
					h := heads[i]
					c, err := verifyLog(gctx, wtx, h.poll, h.size, h.root, h.partial)
					if err != nil {
						return err
					}
					out[i] = c
				}
			})
		})
	}
	return g.Wait()
}

// logHeadRow is a stored head, as verifyLogs reads it.
type logHeadRow struct {
	poll          string
	size          int64
	root, partial []byte
}

// snapshotID is the form of a name pg_export_snapshot gives, which
// verifyLogs writes into SET TRANSACTION SNAPSHOT (it takes no parameter).
var snapshotID = regexp.MustCompile(`^[0-9A-F]+-[0-9A-F]+(-[0-9]+)?$`)

// problemFingerprint is the problem of a row whose stored fingerprint is
// not its poll's and candidate's.
const problemFingerprint = "the stored fingerprint does not match the row's poll and candidate"

// verifyLog checks one poll's log: its tree against the rows, then, when
// the tree holds, each row's fingerprint, which the leaf does not cover,
// and each leaf against the definitions.
func verifyLog(ctx context.Context, tx pgx.Tx, poll string, size int64, root, partial []byte) (LogCheck, error) {
	c := LogCheck{PollID: poll, Size: size, Leaf: -1}
	h, err := hashRows(ctx, tx, poll)
	var le *LogError
	switch {
	case errors.As(err, &le):
		c.Leaf, c.Problem = le.Leaf, le.Problem
		return c, nil
	case err != nil:
		return c, err
	}
	if err := tx.QueryRow(ctx, pollRowCountSQL, poll).Scan(&h.rows); err != nil {
		return c, err
	}
	return checkLog(ctx, tx, txTiles{tx}, c, h, root, partial)
}

// checkLog checks a poll's leaves, hashed, against its stored head and
// tiles (from tiles), then their fingerprints and definitions.
func checkLog(ctx context.Context, tx pgx.Tx, tiles tileSource, c LogCheck, h hashed, root, partial []byte) (LogCheck, error) {
	c, err := checkHashed(ctx, tx, tiles, c, h, root, partial)
	if err != nil || !c.OK() {
		return c, err
	}
	switch {
	case h.badFP >= 0:
		c.Leaf, c.Problem = h.badFP, problemFingerprint
	case h.badDef >= 0:
		c.Leaf, c.Problem = h.badDef, h.defProblem
	}
	return c, nil
}

// checkHashed checks a poll's rows, hashed in leaf order, against its
// stored head (of c.Size leaves, root and partial tiles) and full tiles.
func checkHashed(ctx context.Context, tx pgx.Tx, tiles tileSource, c LogCheck, h hashed, root, partial []byte) (LogCheck, error) {
	state, full, n, size := h.state, h.full, h.n, c.Size
	c.Rows, c.Definitions = h.rows, h.defs
	if root == nil {
		c.Problem = "the log is still to build from rows older than it: run tally migrate up"
		return c, nil
	}
	leaf, what := h.tiles.leaf, h.tiles.what
	if !h.tilesCompared {
		var err error
		if leaf, what, err = firstTileDifference(ctx, tiles, c.PollID, full); err != nil {
			return c, err
		}
	}
	if what != "" {
		c.Leaf, c.Problem = leaf, what
		return c, nil
	}
	storedPartial, err := splitPartial(size, partial)
	if n != size || err != nil {
		c.Leaf = min(n, size)
		c.Problem = fmt.Sprintf("the head counts %d leaves, the log numbers %d rows", size, n)
		return c, nil
	}
	// Every leaf is a row of the poll (hashRows); with as many rows as
	// leaves, every row is a leaf, unless a leaf names a row twice, which
	// the tiles would show. Only when the counts differ is the row in no
	// leaf looked for, to name it.
	if c.Rows+h.defs != n {
		var unnumbered *int64
		if err := tx.QueryRow(ctx, unnumberedSQL, c.PollID).Scan(&unnumbered); err != nil {
			return c, err
		}
		c.Leaf = n
		c.Problem = fmt.Sprintf("the ledger has %d rows of the poll, its log %d leaves of votes", c.Rows, n-h.defs)
		if unnumbered != nil {
			c.Problem = fmt.Sprintf("the ledger row of seq %d is in no leaf of the log (the ledger has %d rows, the log %d leaves of votes): it was inserted outside an append", *unnumbered, c.Rows, n-h.defs)
		}
		return c, nil
	}
	for level, data := range state.partial {
		idx := size >> (tileHeight * level) >> tileHeight
		if leaf, what := firstDifference(level, idx, data, storedPartial[level]); what != "" {
			c.Leaf, c.Problem = leaf, what
			return c, nil
		}
	}
	if !bytes.Equal(state.root[:], root) {
		c.Problem = fmt.Sprintf("the rows hash to root %s, the head stores %s", state.root, tlog.Hash(root))
	}
	return c, nil
}

// firstDifference compares a tile the rows make with the stored one and
// names the first leaf under the first hash that differs.
func firstDifference(level int, idx int64, made, stored []byte) (int64, string) {
	first := idx << tileHeight << (tileHeight * level) // first leaf under the tile
	if len(made) == 0 && len(stored) == 0 {
		return 0, ""
	}
	if stored == nil {
		return first, fmt.Sprintf("tile %d/%d of the log is missing", level, idx)
	}
	for i := 0; i*hashSize < len(made); i++ {
		a := made[i*hashSize : (i+1)*hashSize]
		if (i+1)*hashSize > len(stored) || !bytes.Equal(a, stored[i*hashSize:(i+1)*hashSize]) {
			leaf := first + int64(i)<<(tileHeight*level)
			if level == 0 {
				return leaf, "the row does not hash to the leaf the log stores: it was changed, inserted, removed or moved"
			}
			return leaf, fmt.Sprintf("tile %d/%d of the log differs from the rows under it", level, idx)
		}
	}
	if len(stored) != len(made) {
		return first, fmt.Sprintf("tile %d/%d of the log holds %d hashes, the rows make %d", level, idx, len(stored)/hashSize, len(made)/hashSize)
	}
	return 0, ""
}

// pollRowCountSQL counts poll $1's ledger rows.
const pollRowCountSQL = `SELECT count(*) FROM poll_events e WHERE ` + pollRowsOf

// unnumberedSQL finds a poll's first ledger row that is no leaf of its
// log (an anti-join, hashed: linear in the rows).
const unnumberedSQL = `
SELECT min(e.seq) FROM poll_events e
LEFT JOIN (SELECT unnest(seqs) AS seq FROM poll_log_leaves WHERE poll_id = $1) l ON l.seq = e.seq
WHERE ` + pollRowsOf + ` AND l.seq IS NULL`

// firstTileDifference compares the full tiles a poll's rows make, full,
// with the stored ones, from tiles, as tileDifference does.
func firstTileDifference(ctx context.Context, tiles tileSource, poll string, full []fullTile) (int64, string, error) {
	var err error
	leaf, what := tileDifference(full, func(fn func(level int16, idx int64, data []byte)) error {
		err = tiles.eachTile(ctx, poll, fn)
		return err
	})
	return leaf, what, err
}

// tileDifference compares the full tiles a poll's rows make, full, with
// the stored ones, which each gives, and names the first leaf under the
// first hash that differs in the first tile of full that differs from its
// stored one, or is not stored ("": none, or each failed). A stored tile
// is compared where each holds it, not copied.
func tileDifference(full []fullTile, each func(fn func(level int16, idx int64, data []byte)) error) (int64, string) {
	at := make(map[[2]int64]int, len(full)) // a tile's place in full
	for i, t := range full {
		at[[2]int64{int64(t.level), t.idx}] = i
	}
	stored := make([]bool, len(full))
	first, leaf, what := len(full), int64(0), ""
	err := each(func(level int16, idx int64, data []byte) {
		i, ok := at[[2]int64{int64(level), idx}]
		if !ok {
			return
		}
		stored[i] = true
		if i < first {
			if l, w := firstDifference(full[i].level, full[i].idx, full[i].data, data); w != "" {
				first, leaf, what = i, l, w
			}
		}
	})
	if err != nil {
		return 0, ""
	}
	for i, ok := range stored[:first] {
		if !ok {
			return firstDifference(full[i].level, full[i].idx, full[i].data, nil)
		}
	}
	return leaf, what
}
