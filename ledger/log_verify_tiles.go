package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// This file owns where the rebuild's check reads the stored full tiles it
// compares with the tiles the rows make: in the check's own transaction,
// poll by poll, or, for the polls the one pass hashes, all of them read
// on a second connection of the pool whose transaction imports the
// rebuild's snapshot, while the rebuild reads the rows (tilesBeside, which
// reads the polls' leaves and the definitions there first). Either way
// every stored tile is compared, in the same state of the ledger as the
// rows.

// tileSource gives a poll's stored full tiles, in no particular order;
// data is valid only during the call to fn.
type tileSource interface {
	eachTile(ctx context.Context, poll string, fn func(level int16, idx int64, data []byte)) error
}

// txTiles reads a poll's stored tiles in tx, when asked.
type txTiles struct{ tx pgx.Tx }

func (s txTiles) eachTile(ctx context.Context, poll string, fn func(level int16, idx int64, data []byte)) error {
	rows, err := s.tx.Query(ctx, `SELECT level, idx, hashes FROM poll_log_tiles WHERE poll_id = $1`, poll)
	if err != nil {
		return err
	}
	var (
		level int16
		idx   int64
		data  pgtype.DriverBytes // valid until the next row
	)
	_, err = pgx.ForEachRow(rows, []any{&level, &idx, &data}, func() error {
		fn(level, idx, data)
		return nil
	})
	return err
}

// heldTile is a stored tile read beforehand.
type heldTile struct {
	level int16
	idx   int64
	data  []byte
}

// heldTiles are the stored tiles of every poll read, by poll.
type heldTiles map[string][]heldTile

func (h heldTiles) eachTile(_ context.Context, poll string, fn func(level int16, idx int64, data []byte)) error {
	h.each(poll, fn)
	return nil
}

func (h heldTiles) each(poll string, fn func(level int16, idx int64, data []byte)) {
	for _, t := range h[poll] {
		fn(t.level, t.idx, t.data)
	}
}

// sideReader reads, beside the pass, the leaves of its polls, the
// definitions and the stored tiles.
type sideReader struct {
	leaves chan struct{} // closed when they are read (or it failed)
	// asked, when not nil, is closed when the pass first waits for the
	// leaves, which are read only then (Store.leavesAfterRows).
	asked  chan struct{}
	ask    sync.Once
	done   chan struct{} // closed when everything is read (or it failed)
	cancel context.CancelFunc
	set    passLeafSet // the leaves and definitions, once leaves is closed
	tiles  heldTiles
	// leavesErr is the error of the leaves' read (set before leaves is
	// closed), err the error of the whole (before done is).
	leavesErr, err error
}

// tilesBeside takes a connection of the pool and starts reading on it,
// in a transaction that imports tx's snapshot (pg_export_snapshot, as
// verifyEach's workers do), the leaves of polls and the definitions, and
// then the stored tiles of every poll (pollID's when set), and returns:
// the pass reads the rows meanwhile, and takes what it read. The read
// needs nothing else to end, so the pass's hashers may wait for it. It
// returns nil, reading nothing, when the pool has no connection to spare
// beside tx's: the pass then reads the leaves, and the check each poll's
// tiles, in tx.
func (s *Store) tilesBeside(ctx context.Context, tx pgx.Tx, pollID *string, polls map[string]*passPoll) (*sideReader, error) {
	if s.pool.Config().MaxConns < 2 {
		return nil, nil
	}
	snapshot, err := exportSnapshot(ctx, tx, "the leaves' and tiles' reader")
	if err != nil {
		return nil, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("a connection for the leaves' and tiles' reader: %w", err)
	}
	r := &sideReader{leaves: make(chan struct{}), done: make(chan struct{}), tiles: heldTiles{}}
	if s.leavesAfterRows {
		r.asked = make(chan struct{})
	}
	ctx, r.cancel = context.WithCancel(ctx)
	go func() {
		defer close(r.done)
		defer conn.Release()
		leavesRead := false
		r.err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(wtx pgx.Tx) error {
			if err := importSnapshot(ctx, wtx, snapshot); err != nil {
				return err
			}
			if r.asked != nil {
				select {
				case <-r.asked:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			r.set, r.leavesErr = readLeafSet(ctx, wtx, polls, pollID)
			leavesRead = true
			close(r.leaves)
			if r.leavesErr != nil {
				return r.leavesErr
			}
			return r.read(ctx, wtx, pollID)
		})
		if !leavesRead {
			r.leavesErr = r.err
			close(r.leaves)
		}
	}()
	return r, nil
}

// leavesRead reports whether r has read the leaves (or failed to).
func (r *sideReader) leavesRead() bool {
	select {
	case <-r.leaves:
		return true
	default:
		return false
	}
}

// waitLeaves waits until r has read the leaves and the definitions, and
// returns them.
func (r *sideReader) waitLeaves() (passLeafSet, error) {
	if r.asked != nil {
		r.ask.Do(func() { close(r.asked) })
	}
	<-r.leaves
	if r.leavesErr != nil {
		return passLeafSet{}, fmt.Errorf("read the logs' leaves beside the pass: %w", r.leavesErr)
	}
	return r.set, nil
}

// read reads the tiles, each copied into blocks of a MiB shared by many.
// It reads the binary values as they come (as passRows does the rows),
// without a scan of each into a value of its own: a ledger of 2M leaves
// has some 135,000 tiles.
func (r *sideReader) read(ctx context.Context, tx pgx.Tx, pollID *string) error {
	rows, err := tx.Query(ctx, `SELECT poll_id, level, idx, hashes FROM poll_log_tiles WHERE $1::text IS NULL OR poll_id = $1`, pollID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for i, f := range rows.FieldDescriptions()[1:] {
		if f.Format != pgx.BinaryFormatCode {
			return fmt.Errorf("read the stored tiles: column %d came in text, the reader reads it in binary", i+2)
		}
	}
	var (
		block []byte
		last  string // the poll of the tile before, as a key of r.tiles
	)
	for rows.Next() {
		v := rows.RawValues()
		if len(v) != 4 || len(v[1]) != 2 || len(v[2]) != 8 {
			return errors.New("read the stored tiles: a row not of the form asked for")
		}
		data := v[3]
		if len(block)+len(data) > cap(block) {
			block = make([]byte, 0, max(1<<20, len(data)))
		}
		block = append(block, data...)
		if string(v[0]) != last {
			last = string(v[0])
		}
		r.tiles[last] = append(r.tiles[last], heldTile{
			level: int16(binary.BigEndian.Uint16(v[1])),
			idx:   int64(binary.BigEndian.Uint64(v[2])),
			data:  block[len(block)-len(data):],
		})
	}
	return rows.Err()
}

// wait waits for the read and returns the tiles read; nil r waits for
// nothing and reads the tiles in tx.
func (r *sideReader) wait(tx pgx.Tx) (tileSource, error) {
	if r == nil {
		return txTiles{tx}, nil
	}
	<-r.done
	if r.err != nil {
		return nil, fmt.Errorf("read the logs' leaves and stored tiles: %w", r.err)
	}
	return r.tiles, nil
}

// stop ends the read, if it still runs, and waits for it.
func (r *sideReader) stop() {
	if r != nil {
		r.cancel()
		<-r.done
	}
}

// exportSnapshot exports tx's snapshot for another transaction to import
// (for what, named in the error).
func exportSnapshot(ctx context.Context, tx pgx.Tx, what string) (string, error) {
	var snapshot string
	if err := tx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snapshot); err != nil {
		return "", fmt.Errorf("export the snapshot for %s: %w", what, err)
	}
	if !snapshotID.MatchString(snapshot) {
		return "", fmt.Errorf("PostgreSQL exported a snapshot named %q, not of the expected form", snapshot)
	}
	return snapshot, nil
}

// importSnapshot makes tx, which has run nothing yet, see the snapshot
// exportSnapshot gave.
func importSnapshot(ctx context.Context, tx pgx.Tx, snapshot string) error {
	if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+snapshot+`'`); err != nil {
		return fmt.Errorf("import the rebuild's snapshot: %w", err)
	}
	return nil
}
