package testenv_test

import (
	"context"
	"testing"
	"time"

	"tally/internal/testenv"
)

// A private PostgreSQL survives a crash: what committed before it is there
// after the restart, on the same port.
func TestPGServerCrashRestart(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	db := pg.Migrated("tally")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE crash_probe (n int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO crash_probe VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	pg.Restart()
	var n int
	testenv.Eventually(t, 5*time.Second, "a read after the restart", func() error {
		return db.Pool.QueryRow(ctx, `SELECT n FROM crash_probe`).Scan(&n)
	})
	if n != 42 {
		t.Fatalf("after the crash the row holds %d, want 42", n)
	}
}
