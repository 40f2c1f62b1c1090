package migrations_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/internal/testenv"
)

// BenchmarkPollEventsIDCheck reports what migration 00019's id check
// costs PostgreSQL per row inserted into the ledger: rows of ledger shape
// (ids of 6 to 34 bytes) inserted in statements of 100,000 (1,000 with
// -short, which make test gives) into two copies of poll_events with its
// indexes, one with the check and one without, alternating, each round
// timed by the backend's own CPU (from /proc, PostgreSQL on this host)
// and by the statement's time; then the check's expression alone,
// evaluated over the rows inserted, against the same scan without it
// (cpu-eval).
func BenchmarkPollEventsIDCheck(b *testing.B) {
	benchRows := 100_000
	if testing.Short() { // make test runs every benchmark once
		benchRows = 1_000
	}
	ctx := context.Background()
	db := testenv.Postgres(b)
	var check string
	err := db.Pool.QueryRow(ctx, `
SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'poll_events_ids_check' AND conrelid = 'poll_events'::regclass`).Scan(&check)
	if err != nil {
		b.Fatalf("read the check of migration 00019: %v", err)
	}
	tables := []string{"ev_plain", "ev_checked"}
	for _, t := range tables {
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+t+` (LIKE poll_events INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES)`); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `ALTER TABLE ev_checked ADD CONSTRAINT ev_checked_ids `+check); err != nil {
		b.Fatal(err)
	}
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	cpu := make([]time.Duration, len(tables))
	wall := make([]time.Duration, len(tables))
	rows := 0
	b.ResetTimer()
	for i := range b.N {
		for j, t := range tables {
			c0, t0 := backendCPU(b, pid), time.Now()
			_, err := conn.Exec(ctx, `
INSERT INTO `+t+` (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
SELECT 'poll-' || (g % 100), 'choice-' || (g % 4), 'o-' || md5(g::text), 'e-' || lpad(g::text, 24, '0'), '\x00', now()
FROM generate_series($1::bigint, $1::bigint + $2 - 1) g`, int64(i*benchRows), benchRows)
			if err != nil {
				b.Fatal(err)
			}
			wall[j] += time.Since(t0)
			cpu[j] += backendCPU(b, pid) - c0
		}
		rows += benchRows
	}
	b.StopTimer()
	// The check alone, evaluated over every row inserted without it,
	// against the same scan without it, alternating.
	expr := strings.TrimSuffix(strings.TrimPrefix(check, "CHECK ("), ")")
	var scan, eval time.Duration
	for range 5 {
		for j, q := range []string{`SELECT count(*) FROM ev_plain`, `SELECT count(*) FROM ev_plain WHERE ` + expr} {
			c0 := backendCPU(b, pid)
			if _, err := conn.Exec(ctx, q); err != nil {
				b.Fatal(err)
			}
			if j == 0 {
				scan += backendCPU(b, pid) - c0
			} else {
				eval += backendCPU(b, pid) - c0
			}
		}
	}
	b.ReportMetric(float64((eval-scan).Nanoseconds())/float64(5*rows), "cpu-eval-ns/row")
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(rows) }
	b.ReportMetric(per(cpu[0]), "cpu-plain-ns/row")
	b.ReportMetric(per(cpu[1]), "cpu-checked-ns/row")
	b.ReportMetric(per(cpu[1]-cpu[0]), "cpu-check-ns/row")
	b.ReportMetric(per(wall[0]), "plain-ns/row")
	b.ReportMetric(per(wall[1]), "checked-ns/row")
}

// backendCPU is the CPU time PostgreSQL's backend pid used so far, read
// from /proc (so only for a PostgreSQL on this host).
func backendCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Skipf("PostgreSQL's backend is not on this host: %v", err)
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line, in clock ticks (100 a second).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			tb.Fatalf("read /proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
