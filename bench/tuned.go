package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"tally/internal/pgbin"
	"time"

	"github.com/jackc/pgx/v5"
)

// setting is one line of a postgresql.conf.
type setting struct{ name, value string }

// tunedSettings is the production configuration of PostgreSQL that the
// tuned measurement runs on, for a host with ramBytes of memory whose
// PostgreSQL has the host to itself (2 cores and 24 GiB give shared_buffers
// 6GB, effective_cache_size 18GB); walCompression is lz4 where the server
// has it. docs/operations.md (Sizing) quotes it: keep the two alike.
func tunedSettings(ramBytes int64, walCompression string) []setting {
	const mb = 1 << 20
	return []setting{
		// A quarter of the memory, at most 8GB: the hot part of the indexes
		// of poll_events and the log stays in PostgreSQL's own cache; the
		// rest is left to the page cache, which effective_cache_size names.
		{"shared_buffers", memSetting(min(max(ramBytes/4, 128*mb), 8<<30))},
		{"effective_cache_size", memSetting(ramBytes * 3 / 4)},
		// Large enough that checkpoints come from checkpoint_timeout, not
		// from WAL volume: fewer checkpoints, so fewer full-page images in
		// the WAL, each spread over 90% of the interval.
		{"max_wal_size", "16GB"},
		{"min_wal_size", "2GB"},
		{"checkpoint_timeout", "15min"},
		{"checkpoint_completion_target", "0.9"},
		// Full-page images compressed: less WAL to write, to archive and to
		// ship to a standby, for a little CPU.
		{"wal_compression", walCompression},
		// Room for the WAL of a few batches in flight between flushes.
		{"wal_buffers", "64MB"},
		// Modest: the appends do not sort; rebuild and reports may.
		{"work_mem", "16MB"},
		{"maintenance_work_mem", "1GB"},
		// What a vote's acknowledgement relies on, written out: each commit
		// flushed to disk, and pages safe from torn writes.
		{"fsync", "on"},
		{"full_page_writes", "on"},
		{"synchronous_commit", "on"},
	}
}

// measureTuned: PT, C1T, C2T, UT and BLT, as P, C1, C2 and U on a private
// PostgreSQL started with tunedSettings, stopped and removed afterwards.
func measureTuned(ctx context.Context, e *env, sz sizes, t *table) error {
	srv, err := startTunedPostgres(ctx)
	if err != nil {
		return err
	}
	defer srv.stop()
	te := e.onServer(srv.adminURL())
	defer te.release(context.WithoutCancel(ctx))
	const on = " on a private PostgreSQL with the tuned configuration (docs/operations.md)"

	load := loadAvg()
	r, err := te.drainProjector(ctx, e.tally, "projtuned", sz.projector, sz.projectorLimit)
	if err != nil {
		return err
	}
	if r.events < sz.projector {
		return fmt.Errorf("the projector applied %d of %d events within %s on the tuned server", r.events, sz.projector, sz.projectorLimit)
	}
	t.add(fig{id: "PT", what: "projector as P" + on, value: r.rate(), unit: "events/s", load: load,
		command: r.command + "  (server: " + srv.summary + ")", extra: r.cpu() + "; " + r.wal()})
	t.add(fig{id: "BLT", what: "disk: bytes per event of the ledger and its log after PT (tables and indexes)",
		value: float64(r.bytes) / float64(r.events), unit: "B", load: load,
		extra:   fmt.Sprintf("of which indexes %.0f B", float64(r.indexBytes)/float64(r.events)),
		command: "pg_total_relation_size and pg_indexes_size of poll_events and poll_log_* after PT"})
	for _, w := range []int{1, 2} {
		te.settle(ctx)
		load := loadAvg()
		v, cpu, err := te.copyCeiling(ctx, sz.copyRows, 10_000, w)
		if err != nil {
			return err
		}
		t.add(fig{id: fmt.Sprintf("C%dT", w), what: fmt.Sprintf("raw COPY as C%d", w) + on, value: v, unit: "rows/s", load: load,
			extra: fmt.Sprintf("CPU per row: PostgreSQL %.1f µs", cpu), command: "bench -only tuned  (the server of PT)"})
	}
	te.settle(ctx)
	load = loadAvg()
	const batch, writers = 1000, 2
	v, cpu, err := te.unnestFloor(ctx, sz.projector, batch, writers)
	if err != nil {
		return err
	}
	t.add(fig{id: "UT", what: "the schema's floor as U" + on, value: v, unit: "events/s", load: load,
		extra: fmt.Sprintf("CPU per event: PostgreSQL %.1f µs", cpu), command: "bench -only tuned  (the server of PT)"})
	return nil
}

// pgServer is a private PostgreSQL on a free loopback port, with its data
// directory, socket and log in dir.
type pgServer struct {
	bin     string // directory of initdb, pg_ctl and postgres
	dir     string
	as      []string // command prefix that runs as the postgres OS user, or nil
	port    int
	summary string // the settings it runs with, name=value
}

// startTunedPostgres initializes a cluster in a fresh directory under the
// working directory's .local (scripts/bench.sh runs from the
// repository's root), writes tunedSettings into its postgresql.conf,
// starts it and checks that every setting took. On failure nothing is
// left behind.
func startTunedPostgres(ctx context.Context) (*pgServer, error) {
	s, err := newPGServer()
	if err != nil {
		return nil, err
	}
	if err := s.init(ctx); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func newPGServer() (*pgServer, error) {
	bin, err := pgbin.Dir()
	if err != nil {
		return nil, fmt.Errorf("the tuned measurement starts a private PostgreSQL: %w; or leave it out (-only without tuned)", err)
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	local, err := filepath.Abs(".local")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(local, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(local, "bench-pg-tuned-")
	if err != nil {
		return nil, err
	}
	s := &pgServer{bin: bin, dir: dir, port: ports[0]}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		if err := pgbin.GiveToPostgres(dir); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.as = []string{"runuser", "-u", "postgres", "--"}
	}
	return s, nil
}

// init creates the cluster, configures it and starts it.
func (s *pgServer) init(ctx context.Context) error {
	data := filepath.Join(s.dir, "data")
	// --no-sync: the cluster lives only as long as the measurement.
	if out, err := s.run(ctx, "initdb", "--pgdata", data, "--username", "postgres", "--auth", "trust",
		"--encoding", "UTF8", "--no-instructions", "--no-sync"); err != nil {
		hint := ""
		if s.as != nil {
			hint = " (the postgres OS user must be able to reach " + s.dir + ": every directory above it needs o+x)"
		}
		return fmt.Errorf("initdb of the tuned PostgreSQL failed%s: %v\n%s", hint, err, out)
	}
	ram, err := memBytes()
	if err != nil {
		return err
	}
	settings := tunedSettings(ram, s.walCompression(ctx, data))
	conf := "\n# The tuned configuration of the bench (tunedSettings).\n"
	var summary []string
	for _, st := range settings {
		conf += fmt.Sprintf("%s = '%s'\n", st.name, st.value)
		summary = append(summary, st.name+"="+st.value)
	}
	s.summary = strings.Join(summary, " ")
	conf += fmt.Sprintf("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n", s.port, s.dir)
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	if out, err := s.run(ctx, "pg_ctl", "start", "--pgdata", data, "--wait", "--timeout", "60",
		"--log", filepath.Join(s.dir, "postgres.log")); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
		return fmt.Errorf("the tuned PostgreSQL did not start on 127.0.0.1:%d (%v); its output and log say why:\n%s\n%s",
			s.port, err, out, log)
	}
	return s.check(ctx, settings)
}

// walCompression is lz4 when the server accepts it (PostgreSQL 15 and
// later, built with lz4), else on (pglz): postgres -C reads the
// configuration without starting a server.
func (s *pgServer) walCompression(ctx context.Context, data string) string {
	if _, err := s.run(ctx, "postgres", "-D", data, "-C", "wal_compression", "-c", "wal_compression=lz4"); err == nil {
		return "lz4"
	}
	return "on"
}

// check fails unless every setting came from the configuration file.
func (s *pgServer) check(ctx context.Context, settings []setting) error {
	conn, err := pgx.Connect(ctx, s.adminURL())
	if err != nil {
		return fmt.Errorf("connect to the tuned PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	names := make([]string, len(settings))
	for i, st := range settings {
		names[i] = st.name
	}
	rows, err := conn.Query(ctx, `SELECT name || ' (' || source || ')' FROM pg_settings
		WHERE name = ANY($1) AND source <> 'configuration file' ORDER BY name`, names)
	if err != nil {
		return err
	}
	odd, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(odd) > 0 {
		return fmt.Errorf("the tuned PostgreSQL does not run with its configuration: %s", strings.Join(odd, ", "))
	}
	return nil
}

func (s *pgServer) adminURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// stop stops the server, without a checkpoint since its data goes with it,
// and removes its directory.
func (s *pgServer) stop() {
	data := filepath.Join(s.dir, "data")
	if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if out, err := s.run(ctx, "pg_ctl", "stop", "--pgdata", data, "--mode", "immediate", "--wait", "--timeout", "60"); err != nil {
			fmt.Fprintf(os.Stderr, "bench: stop the tuned PostgreSQL in %s: %v\n%s", s.dir, err, out)
			return // leave the directory to look at
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		fmt.Fprintf(os.Stderr, "bench: remove %s: %v\n", s.dir, err)
	}
}

// run runs one of the server binaries as the server's user, for at most
// two minutes.
func (s *pgServer) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	argv := append(append(append([]string(nil), s.as...), filepath.Join(s.bin, name)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

// memSetting is a memory setting of b bytes: in whole GB from 2GB up,
// else in MB.
func memSetting(b int64) string {
	if b >= 2<<30 {
		return fmt.Sprintf("%dGB", (b+1<<29)>>30)
	}
	return fmt.Sprintf("%dMB", b>>20)
}

// memBytes is the host's memory, from /proc/meminfo.
func memBytes() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("read the host's memory: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read the host's memory: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("read the host's memory: no MemTotal in /proc/meminfo")
}
