package ledger

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"tally/audit"
)

// This file owns what a poll's rows wait for in the rebuild's one pass
// (log_pass.go) before they go to its hasher: the poll's leaves, in leaf
// order, and the definitions, read in the rebuild's transaction or, beside
// the pass, in the reader's (log_verify_tiles.go).

// passHeldForLeaves bounds the rows the pass takes before the leaves are
// in: past it, it waits for them rather than hold more.
const passHeldForLeaves = 1 << 16

// passLeafSet is what a poll's rows wait for before they go to its hasher:
// its leaves, in leaf order, and every definition.
type passLeafSet struct {
	seqs map[string][]int64
	// broken are the polls whose leaf rows are not numbered one after
	// another from 0: the per-poll check names what is wrong.
	broken map[string]bool
	defs   map[int64]*audit.Definition
}

// readLeafSet reads in tx the leaves of the polls and the definitions
// (pollID's when set). It reads nothing of the polls but their ids and
// sizes, so it may run beside the pass.
//
// The leaves come in no order (sorting them costs PostgreSQL more than
// putting them in order here), and their seqs arrays are read as they
// come in binary, without a scan of each element.
func readLeafSet(ctx context.Context, tx pgx.Tx, polls map[string]*passPoll, pollID *string) (passLeafSet, error) {
	set := passLeafSet{seqs: map[string][]int64{}, broken: map[string]bool{}}
	rows, err := tx.Query(ctx, `SELECT poll_id, first_leaf, seqs FROM poll_log_leaves WHERE poll_id = ANY($1)`, slices.Collect(maps.Keys(polls)))
	if err != nil {
		return set, interpretError("read the logs' leaves", err)
	}
	defer rows.Close()
	if f := rows.FieldDescriptions(); f[1].Format != pgx.BinaryFormatCode || f[2].Format != pgx.BinaryFormatCode {
		return set, errors.New("read the logs' leaves: first_leaf and seqs came in text, the pass reads them in binary")
	}
	type chunk struct {
		first int64
		seqs  []int64
	}
	chunks := map[string][]chunk{}
	for rows.Next() {
		v := rows.RawValues()
		pp := polls[string(v[0])]
		if pp == nil {
			continue
		}
		seqs, err := int8Array(v[2])
		if len(v[1]) != 8 || err != nil {
			return set, fmt.Errorf("read the logs' leaves of poll %s: a row not of the form asked for: %v", pp.id, err)
		}
		chunks[pp.id] = append(chunks[pp.id], chunk{int64(binary.BigEndian.Uint64(v[1])), seqs})
	}
	if err := rows.Err(); err != nil {
		return set, interpretError("read the logs' leaves", err)
	}
	for id, pp := range polls {
		cs := chunks[id]
		slices.SortFunc(cs, func(a, b chunk) int { return cmp.Compare(a.first, b.first) })
		seqs := make([]int64, 0, pp.size)
		for _, c := range cs {
			if c.first != int64(len(seqs)) {
				set.broken[id] = true
			}
			seqs = append(seqs, c.seqs...)
		}
		set.seqs[id] = seqs
	}
	set.defs, err = passDefinitions(ctx, tx, pollID)
	return set, err
}

// install gives each poll its leaves and the definitions, and hands its
// hasher the leaves that are next and at hand.
func (set passLeafSet) install(polls map[string]*passPoll) {
	for id, pp := range polls {
		pp.seqs, pp.defs = set.seqs[id], set.defs
		if set.broken[id] {
			pp.fail()
			continue
		}
		if !pp.failed {
			pp.catchUp()
		}
	}
}

// int8Array is a one-dimensional bigint[] without nulls in PostgreSQL's
// binary format (array_send): its dimensions, its element type, then each
// element's length and value.
func int8Array(b []byte) ([]int64, error) {
	const int8OID = 20
	if len(b) < 12 {
		return nil, errors.New("an array too short for its header")
	}
	ndim, nulls, elem := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:]), binary.BigEndian.Uint32(b[8:])
	switch {
	case ndim == 0 && len(b) == 12:
		return nil, nil
	case ndim != 1 || len(b) < 20:
		return nil, fmt.Errorf("an array of %d dimensions, want 1", ndim)
	case nulls != 0 || elem != int8OID:
		return nil, fmt.Errorf("an array of type %d with nulls %d, want bigint without", elem, nulls)
	}
	n := int(binary.BigEndian.Uint32(b[12:]))
	b = b[20:]
	if len(b) != 12*n {
		return nil, fmt.Errorf("an array of %d bytes for its %d elements", len(b), n)
	}
	out := make([]int64, n)
	for i := range out {
		if binary.BigEndian.Uint32(b[12*i:]) != 8 {
			return nil, fmt.Errorf("element %d is not 8 bytes", i)
		}
		out[i] = int64(binary.BigEndian.Uint64(b[12*i+4:]))
	}
	return out, nil
}

// passDefinitions reads the definitions of the polls (one's when pollID is
// set), by id.
func passDefinitions(ctx context.Context, tx pgx.Tx, pollID *string) (map[int64]*audit.Definition, error) {
	rows, err := tx.Query(ctx, `
SELECT d.id, `+definitionCols+` FROM poll_definitions d
WHERE $1::text IS NULL OR d.poll_id = $1`, pollID)
	if err != nil {
		return nil, interpretError("read the polls' definitions", err)
	}
	out := map[int64]*audit.Definition{}
	var (
		id  int64
		def definitionRow
	)
	_, err = pgx.ForEachRow(rows, append([]any{&id}, def.targets()...), func() error {
		d := def.definition()
		out[id] = &d
		return nil
	})
	return out, interpretError("read the polls' definitions", err)
}
