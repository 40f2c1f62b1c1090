package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartStandby makes a streaming standby of primary with pg_basebackup
// (--write-recovery-conf: it follows the primary from the backup on) and
// starts it on a free port of its own; t's cleanup stops it. With sync,
// the primary is made to wait for the standby at every commit
// (synchronous_standby_names = '*'), so a commit the primary confirmed is
// on the standby's disk, and StartStandby returns once the standby is the
// synchronous one. The PostgreSQL server binaries must be installed.
func StartStandby(t testing.TB, primary *PGServer, sync bool) *PGServer {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	s := &PGServer{t: t, Port: port, bin: primary.bin, dir: t.TempDir(), as: primary.as}
	s.data = filepath.Join(s.dir, "data")
	if os.Geteuid() == 0 {
		if err := s.giveToPostgres(); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := s.run("pg_basebackup", "--host", "127.0.0.1", "--port", strconv.Itoa(primary.Port), "--username", "postgres",
		"--pgdata", s.data, "--write-recovery-conf", "--wal-method", "stream", "--checkpoint", "fast"); err != nil {
		t.Fatalf("pg_basebackup of %s: %v\n%s", primary.Addr(), err, out)
	}
	s.Start()
	t.Cleanup(s.Stop)
	if sync {
		primary.makeSynchronous(t)
	}
	return s
}

// makeSynchronous makes every commit on s wait for a standby's flush, and
// waits (30s at most) until a standby streams synchronously.
func (s *PGServer) makeSynchronous(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatalf("connect to the primary: %v", err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'`).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no synchronous standby streams from %s within 30s (%v)", s.Addr(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Promote ends a standby's recovery and waits until it takes writes: it
// is a primary from then on.
func (s *PGServer) Promote() {
	s.t.Helper()
	if out, err := s.run("pg_ctl", "promote", "--pgdata", s.data, "--wait", "--timeout", "60"); err != nil {
		s.t.Fatalf("promote the standby on %s: %v\n%s", s.Addr(), err, out)
	}
}

// MultiHostURL is the URL of database db on servers, tried in order, that
// connects only to the one that takes writes (target_session_attrs=
// read-write): the primary, and after a failover the promoted standby.
func MultiHostURL(user, db string, servers ...*PGServer) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = s.Addr()
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&target_session_attrs=read-write", user, strings.Join(hosts, ","), db)
}
