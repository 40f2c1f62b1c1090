package ledger_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"tally/ledger"
)

// TestBufferedReads: a pool whose connections read through the buffer
// reads what an unbuffered one does, a result of many small rows, a value
// larger than the buffer, and a rebuild of a ledger, and a connection
// holds nothing back between statements.
func TestBufferedReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	store, pool := b.ownStore(t, func(cfg *pgxpool.Config) {
		ledger.BufferedReads(&cfg.ConnConfig.Config)
		cfg.MaxConns = 2
	})

	var sum, n int64
	if err := pool.QueryRow(b.ctx, `SELECT sum(length(s)), count(*) FROM (SELECT repeat('x', i % 50) AS s FROM generate_series(1, 100000) i) t`).Scan(&sum, &n); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(b.ctx, `SELECT repeat('x', i % 50) FROM generate_series(1, 100000) i`)
	if err != nil {
		t.Fatal(err)
	}
	var got, count int64
	for rows.Next() {
		got += int64(len(rows.RawValues()[0]))
		count++
	}
	if err := rows.Err(); err != nil || got != sum || count != n {
		t.Fatalf("rows: %d bytes in %d rows (%v), want %d in %d", got, count, err, sum, n)
	}
	var big []byte
	if err := pool.QueryRow(b.ctx, `SELECT decode(repeat('ab', 300000), 'hex')`).Scan(&big); err != nil || !bytes.Equal(big, bytes.Repeat([]byte{0xab}, 300000)) {
		t.Fatalf("a value of 300,000 bytes: %d bytes, %v", len(big), err)
	}

	b.poll(t, "p", "a", "b")
	batch := make([]ledger.Event, 500)
	for i := range batch {
		batch[i] = ev(fmt.Sprintf("u%d", i), "k", "p", []string{"a", "b"}[i%2])
	}
	if _, err := b.store.Append(b.ctx, batch); err != nil {
		t.Fatal(err)
	}
	want := checkInvariants(t, b)
	rep, err := store.Rebuild(context.Background(), "")
	if err != nil || rep.Differing != 0 || rep.LogProblems != 0 || rep.LedgerEvents != want.LedgerEvents {
		t.Fatalf("rebuild through the buffer: %+v, %v; want %d events, nothing differing", rep, err, want.LedgerEvents)
	}
}
