package ledger

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// encodeInt8Array is seqs as PostgreSQL sends a bigint[] in binary, by
// pgx's own codec: what int8Array reads.
func encodeInt8Array(t testing.TB, seqs []int64) []byte {
	b, err := pgtype.NewMap().Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, seqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestInt8Array(t *testing.T) {
	for _, seqs := range [][]int64{{1}, {7, -3, 1 << 62}, make([]int64, 1000)} {
		got, err := int8Array(encodeInt8Array(t, seqs))
		if err != nil || !slices.Equal(got, seqs) {
			t.Fatalf("int8Array of %d seqs = %v, %v; want them back", len(seqs), got, err)
		}
	}
	good := encodeInt8Array(t, []int64{5, 6})
	for name, b := range map[string][]byte{
		"empty":            nil,
		"short header":     good[:10],
		"two dimensions":   append(binary.BigEndian.AppendUint32(nil, 2), good[4:]...),
		"nulls":            append(append(append([]byte{}, good[:4]...), 0, 0, 0, 1), good[8:]...),
		"int4 elements":    append(append(append([]byte{}, good[:8]...), 0, 0, 0, 23), good[12:]...),
		"an element short": good[:len(good)-1],
		"an element long":  append(append([]byte{}, good...), 0),
		"a 4-byte element": append(append(append([]byte{}, good[:20]...), 0, 0, 0, 4), good[24:]...),
	} {
		if got, err := int8Array(b); err == nil {
			t.Errorf("%s: int8Array = %v, want an error", name, got)
		}
	}
}

// FuzzInt8Array: no input makes int8Array panic, and what it accepts is
// what pgx's codec reads too.
func FuzzInt8Array(f *testing.F) {
	f.Add(encodeInt8Array(f, []int64{1, 2, 3}))
	f.Add(encodeInt8Array(f, []int64{-1}))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := int8Array(b)
		if err != nil {
			return
		}
		var want []int64
		if err := pgtype.NewMap().Scan(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, b, &want); err != nil {
			t.Fatalf("int8Array accepted %x as %v; pgx refuses it: %v", b, got, err)
		}
		if len(got) != len(want) || (len(got) > 0 && !slices.Equal(got, want)) {
			t.Fatalf("int8Array(%x) = %v, pgx reads %v", b, got, want)
		}
	})
}
