package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"tally/internal/pgbin"
	"tally/migrations"
)

// PGServer is a private PostgreSQL instance of one test, which the test may
// crash (immediate stop) and start again. Its data directory lives under
// t.TempDir(); it listens on 127.0.0.1 on a free port that stays the same
// across restarts. When the test runs as root the server runs as the
// postgres OS user, since PostgreSQL refuses to run as root.
type PGServer struct {
	t    testing.TB
	Port int
	bin  string // directory of initdb and pg_ctl
	dir  string // parent of the data directory, the socket and the log
	data string
	as   []string // command prefix that switches to the postgres user, or nil

	mu      sync.Mutex
	running bool
}

// StartPostgres initializes and starts a private PostgreSQL server, and
// stops it when t ends. The test fails when the PostgreSQL server binaries
// are not installed.
func StartPostgres(t testing.TB) *PGServer {
	t.Helper()
	bin, err := pgbin.Dir()
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	s := &PGServer{t: t, Port: port, bin: bin, dir: t.TempDir()}
	s.data = filepath.Join(s.dir, "data")
	if os.Geteuid() == 0 {
		if err := s.giveToPostgres(); err != nil {
			t.Fatal(err)
		}
		s.as = []string{"runuser", "-u", "postgres", "--"}
	}
	if out, err := s.run("initdb", "--pgdata", s.data, "--username", "postgres", "--auth", "trust",
		"--encoding", "UTF8", "--no-instructions"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// giveToPostgres lets the postgres OS user reach and own the server's
// directory: the directories above it that the test created are made
// traversable, and the directory itself changes owner.
func (s *PGServer) giveToPostgres() error {
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Dir(s.dir); strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if err := os.Chmod(d, st.Mode().Perm()|0o711); err != nil {
			return err
		}
	}
	return pgbin.GiveToPostgres(s.dir)
}

// run runs one of the server binaries as the server's user.
func (s *PGServer) run(name string, args ...string) ([]byte, error) {
	argv := append(append(append([]string(nil), s.as...), filepath.Join(s.bin, name)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

// Addr is the server's 127.0.0.1:PORT.
func (s *PGServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the URL of database db on the server.
func (s *PGServer) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.Addr(), db)
}

// Start starts the server (again) and waits until it accepts connections,
// crash recovery included.
func (s *PGServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return
	}
	opts := fmt.Sprintf("-c port=%d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c max_connections=200",
		s.Port, s.dir)
	out, err := s.run("pg_ctl", "start", "--pgdata", s.data, "--wait", "--timeout", "60",
		"--log", filepath.Join(s.dir, "postgres.log"), "-o", opts)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
		s.t.Fatalf("start PostgreSQL on %s: %v\n%s\n%s", s.Addr(), err, out, log)
	}
	s.running = true
}

// Crash stops the server in immediate mode: every server process quits
// without a checkpoint, and the next Start runs crash recovery, as after a
// power cut.
func (s *PGServer) Crash() { s.stop("immediate") }

// Stop stops the server as Crash does; t's cleanup calls it.
func (s *PGServer) Stop() { s.stop("immediate") }

func (s *PGServer) stop(mode string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return
	}
	if out, err := s.run("pg_ctl", "stop", "--pgdata", s.data, "--mode", mode, "--wait", "--timeout", "60"); err != nil {
		s.t.Errorf("stop PostgreSQL on %s: %v\n%s", s.Addr(), err, out)
	}
	s.running = false
}

// Restart crashes the server and starts it again on the same port and data.
func (s *PGServer) Restart() {
	s.Crash()
	s.Start()
}

// Log returns the server's log.
func (s *PGServer) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	return string(b)
}

// Migrated creates database name on the server with the migrations applied,
// and returns it with a pool on it. The pool reconnects after a restart.
func (s *PGServer) Migrated(name string) DB {
	s.t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		s.t.Fatalf("connect to the private PostgreSQL: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		s.t.Fatalf("create database %s: %v", name, err)
	}
	db, err := sql.Open("pgx", s.URL(name))
	if err != nil {
		s.t.Fatal(err)
	}
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := migrations.Up(mctx, db); err != nil {
		db.Close()
		s.t.Fatalf("migrate %s: %v", name, err)
	}
	db.Close()
	pool, err := pgxpool.New(ctx, s.URL(name))
	if err != nil {
		s.t.Fatalf("open %s: %v", name, err)
	}
	s.t.Cleanup(pool.Close)
	return DB{Name: name, URL: s.URL(name), Pool: pool}
}
