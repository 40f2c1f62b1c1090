package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
)

// TestWaitFor checks the start-up wait's pace and its ends: one try when
// the wait is 0, tries until the server answers, gives up with the
// server's error once the wait has passed, and logs each failure.
func TestWaitFor(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	for _, tc := range []struct {
		name      string
		wait      time.Duration
		failures  int // pings that fail before one succeeds; -1: all fail
		wantTries int
		wantErr   bool
	}{
		{"no wait, down", 0, -1, 1, true},
		{"no wait, up", 0, 0, 1, false},
		{"comes up", time.Minute, 2, 3, false},
		// Pauses 0.5 s then 0.7 s (the rest of the wait): tries at 0, 0.5 and 1.2 s.
		{"stays down", 1200 * time.Millisecond, -1, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			tries := 0
			err := waitFor(context.Background(), "Redis", tc.wait, log, func(ctx context.Context) error {
				tries++
				if _, ok := ctx.Deadline(); !ok {
					t.Error("a try has no deadline")
				}
				if tc.failures < 0 || tries <= tc.failures {
					return refused
				}
				return nil
			})
			if tc.wantErr != (err != nil) || err != nil && !errors.Is(err, refused) {
				t.Fatalf("error %v, want the ping's error: %v", err, tc.wantErr)
			}
			if tries != tc.wantTries {
				t.Errorf("%d tries, want %d", tries, tc.wantTries)
			}
			if n := strings.Count(logs.String(), "waiting for Redis"); n != tc.wantTries-1 {
				t.Errorf("%d warnings, want one per failure followed by a try (%d):\n%s", n, tc.wantTries-1, logs.String())
			}
		})
	}
}

// The start-up wait ends as soon as its context does (Ctrl-C), with the
// server's last error rather than the cancellation.
func TestWaitForStopsOnCancel(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	err := waitFor(ctx, "PostgreSQL", time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(context.Context) error { return refused })
	if took := time.Since(start); took > time.Second {
		t.Errorf("waitFor took %s after its context ended at 200ms", took)
	}
	if !errors.Is(err, refused) {
		t.Errorf("error %v, want the ping's error", err)
	}
}

// A daemon waiting at start for a Redis that is down stops at once when
// it is told to stop (its context ends), exit 2, naming the server.
func TestDaemonStartupWaitStopsOnSignal(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	daemonURL := testenv.DaemonLogin(t, db)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done, errOut := runUntilLogged(t, ctx, []string{"intake", "--listen", "127.0.0.1:0", "--database-url", daemonURL,
		"--redis-url", "redis://127.0.0.1:1/0", "--startup-wait", "10m", "--log-format", "text"},
		"waiting for Redis", "intake did not wait for Redis")
	stopped := time.Now()
	stop()
	select {
	case code := <-done:
		if took := time.Since(stopped); took > 2*time.Second {
			t.Errorf("intake took %s to give up its start-up wait", took)
		}
		if code != ExitError || !strings.Contains(errOut.String(), "cannot reach Redis (--redis-mode single) at redis://127.0.0.1:1/0") {
			t.Errorf("intake stopped while waiting for Redis: exit %d\n%s\nwant exit 2 naming Redis", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("intake did not stop within 10s of its context ending")
	}
}

// A URL's password never reaches a message, whether net/url parses it or
// not (a primary and its standby: two host:port).
func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:secret@db:5432/tally", "postgres://u:xxxxx@db:5432/tally"},
		{"postgres://u:secret@db1:5432,db2:5432/tally?target_session_attrs=read-write", "postgres://u:xxxxx@db1:5432,db2:5432/tally?target_session_attrs=read-write"},
		{"postgres://u@db1:5432,db2:5432/tally", "postgres://u@db1:5432,db2:5432/tally"},
		{"redis://:secret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"host=db password=secret dbname=tally", "host=db password=xxxxx dbname=tally"},
		{"host=db password = 'se cret' dbname=tally", "host=db password = xxxxx dbname=tally"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestDaemonsRefuseSuperuser: intake and projector refuse to start as a
// superuser, saying what to do; with --allow-superuser they start, and
// warn.
func TestDaemonsRefuseSuperuser(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t) // its URL logs in as the owner, a superuser
	_, prefix := testenv.Redis(t)
	common := []string{"--database-url", db.URL, "--redis-url", testenv.RedisURL(), "--stream-prefix", prefix,
		"--startup-wait", "0s", "--log-format", "text"}
	for _, daemon := range [][]string{{"intake", "--listen", "127.0.0.1:0"}, {"projector", "--consumer", "role-test"}} {
		r := tallyWith(t, append(daemon, common...)...)
		if r.code == 0 || !strings.Contains(r.stderr, "a superuser") || !strings.Contains(r.stderr, "tally_daemon") ||
			!strings.Contains(r.stderr, "--allow-superuser") {
			t.Errorf("tally %s as a superuser: exit %d, stderr:\n%s\nwant a refusal that names tally_daemon and --allow-superuser", daemon[0], r.code, r.stderr)
		}
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done, errOut := runUntilLogged(t, ctx, append([]string{"projector", "--consumer", "role-test", "--allow-superuser"}, common...),
		"--allow-superuser", "the projector with --allow-superuser did not warn")
	stop()
	if code := testenv.Receive(t, done, 30*time.Second, "the projector to stop"); code != 0 {
		t.Errorf("the projector with --allow-superuser exited %d:\n%s", code, errOut.String())
	}
}

// runBackground runs the tally command line args in the background, as a
// process runs one command (holding runMu), until ctx ends: the channel
// gets its exit code, the buffer its log.
func runBackground(ctx context.Context, args ...string) (<-chan int, *testenv.LogBuffer) {
	done := make(chan int, 1)
	errOut := &testenv.LogBuffer{}
	go func() {
		runMu.Lock() // see runMu
		defer runMu.Unlock()
		done <- Run(ctx, append([]string{"tally"}, args...), strings.NewReader(""), io.Discard, errOut)
	}()
	return done, errOut
}

// runUntilLogged runs tally with args in the background until ctx ends,
// and waits, at most 30s, for its log to say phrase (failing t with
// failure past that). It returns the channel of its exit code and its log.
func runUntilLogged(t *testing.T, ctx context.Context, args []string, phrase, failure string) (<-chan int, *testenv.LogBuffer) {
	t.Helper()
	done, errOut := runBackground(ctx, args...)
	testenv.Eventually(t, 30*time.Second, "the log to say "+phrase, func() error {
		if !strings.Contains(errOut.String(), phrase) {
			return fmt.Errorf("%s:\n%s", failure, errOut.String())
		}
		return nil
	})
	return done, errOut
}

// withURLPart returns the shared PostgreSQL's admin URL with its database
// or its user replaced.
func withURLPart(t *testing.T, database, user string) string {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	if database != "" {
		u.Path = "/" + database
	}
	if user != "" {
		u.User = url.User(user)
	}
	return u.String()
}

// A database that does not exist or a role that may not log in is final:
// the daemons and the commands exit 2 at once, with what to do, however
// long --startup-wait is, and never ask whether PostgreSQL is running.
func TestLoginRefusedIsFinal(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t)
	noDB := withURLPart(t, testenv.RandomName("nosuchdb_"), "")
	noRole := withURLPart(t, "", testenv.RandomName("nosuchrole_"))
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"projector, no such database", []string{"projector", "--database-url", noDB, "--consumer", "final-test"},
			[]string{"SQLSTATE 3D000", "tally migrate up creates a missing database", "--database-url"}},
		{"intake, no such role", []string{"intake", "--listen", "127.0.0.1:0", "--database-url", noRole},
			[]string{"SQLSTATE 28000", "fix the user name in --database-url"}},
		{"migrate status, no such role", []string{"migrate", "status", "--database-url", noRole},
			[]string{"SQLSTATE 28000", "fix the user name in --database-url"}},
	} {
		args := append(tc.args, "--redis-url", testenv.RedisURL(), "--stream-prefix", prefix, "--startup-wait", "1m", "--log-format", "text")
		if tc.args[0] == "migrate" {
			args = tc.args
		}
		start := time.Now()
		r := tallyWith(t, args...)
		took := time.Since(start)
		if r.code != ExitError || took > 5*time.Second {
			t.Errorf("%s: exit %d after %s, want exit 2 at once (not after --startup-wait 1m):\n%s", tc.name, r.code, took.Round(time.Millisecond), r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: the error does not say %q:\n%s", tc.name, w, r.stderr)
			}
		}
		if strings.Contains(r.stderr, "is it running") || strings.Contains(r.stderr, "waiting for PostgreSQL") {
			t.Errorf("%s: a refused login taken for a server that does not answer:\n%s", tc.name, r.stderr)
		}
	}
}

// A wrong password (28P01) is final too: one try, and the hint names the
// password. (The shared server trusts every login, so the refusal is
// PostgreSQL's error value.)
func TestWaitForPasswordRefused(t *testing.T) {
	t.Parallel()
	tries := 0
	refused := &pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "tally"`}
	err := waitFor(context.Background(), "PostgreSQL", time.Minute, nil, func(context.Context) error {
		tries++
		return loginRefused(fmt.Errorf("failed to connect: %w", refused))
	})
	if tries != 1 {
		t.Errorf("%d tries of a refused password, want 1", tries)
	}
	msg := unreachablePostgres("postgres://tally:secret@db/tally", err).Error()
	for _, w := range []string{"SQLSTATE 28P01", "fix the password in --database-url", "tally:xxxxx@db"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
	if strings.Contains(msg, "secret") || strings.Contains(msg, "is it running") {
		t.Errorf("error %q shows the password or asks whether the server runs", msg)
	}
}

// A URL with a misspelled scheme is reported as that, at once, naming the
// flag and the form to write: not as a keyword/value string pgx cannot
// parse, nor (rediss:// to a server without TLS) as a server that does
// not answer.
func TestURLSchemeTypos(t *testing.T) {
	t.Parallel()
	rediss := strings.Replace(testenv.RedisURL(), "redis://", "rediss://", 1)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rebuild", "--database-url", "postgress://postgres@127.0.0.1:5432/tally"}, `--database-url starts with "postgress:", which is not a scheme it takes (postgres://, postgresql://)`},
		{[]string{"rebuild", "--database-url", "http://127.0.0.1:5432/tally"}, `--database-url starts with "http:", which is not a scheme`},
		{[]string{"migrate", "status", "--database-url", "postgresq://127.0.0.1:5432/tally"}, `--database-url starts with "postgresq:"`},
		{[]string{"rebuild", "--database-url", "postgres:/127.0.0.1/tally"}, `--database-url starts with "postgres:" without the // that follows it`},
		{[]string{"rebuild", "--database-url", "postgres//127.0.0.1/tally"}, "--database-url has no scheme"},
		// The keyword/value form passes, "//" in a value too: the server's answer follows.
		{[]string{"rebuild", "--database-url", "host=127.0.0.1 port=5432 user=postgres password=a//b dbname=nosuchdb_x"}, `database "nosuchdb_x" does not exist`},
		{[]string{"status", "--redis-url", "reddis://127.0.0.1:6379/0"}, `--redis-url starts with "reddis:", which is not a scheme it takes (redis://, rediss://, unix://)`},
		{[]string{"status", "--redis-url", "http://127.0.0.1:6379"}, `--redis-url starts with "http:"`},
		{[]string{"status", "--redis-url", "127.0.0.1:6379"}, "--redis-url has no scheme: write redis://HOST:6379/0"},
		{[]string{"status", "--redis-url", rediss}, "answers without TLS: rediss:// is Redis over TLS: write redis://"},
		// A user the server does not have: refused at once, not waited for.
		{[]string{"projector", "--redis-url", strings.Replace(testenv.RedisURL(), "redis://", "redis://nouser:pw@", 1),
			"--database-url", testenv.DatabaseURL(), "--startup-wait", "1m"}, "WRONGPASS invalid username-password pair or user is disabled.: fix the user name or password in --redis-url"},
		// Checked before the daemon waits for a PostgreSQL that is down.
		{[]string{"projector", "--redis-url", "reddis://127.0.0.1:6379/0", "--database-url", "postgres://127.0.0.1:1/none", "--startup-wait", "1m"}, `--redis-url starts with "reddis:"`},
	} {
		start := time.Now()
		r := tallyWith(t, tc.args...)
		took := time.Since(start)
		if r.code != ExitError || took > 5*time.Second || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("tally %s: exit %d after %s, stderr:\n%s\nwant exit 2 at once saying %q", strings.Join(tc.args, " "), r.code, took.Round(time.Millisecond), r.stderr, tc.want)
		}
	}
}

// A redis:// URL to a Redis that speaks only TLS is reported as that, at
// once, even by a daemon's start-up wait: not as a server that is not
// running.
func TestRedisURLWithoutTLS(t *testing.T) {
	t.Parallel()
	addr := startTLSRedis(t)
	start := time.Now()
	r := tallyWith(t, "projector", "--redis-url", "redis://"+addr+"/0", "--database-url", testenv.DatabaseURL(), "--startup-wait", "1m")
	took := time.Since(start)
	want := "speaks TLS: redis:// is Redis without TLS: write rediss://"
	if r.code != ExitError || took > 5*time.Second || !strings.Contains(r.stderr, want) {
		t.Errorf("redis:// to a TLS Redis: exit %d after %s, stderr:\n%s\nwant exit 2 at once saying %q", r.code, took.Round(time.Millisecond), r.stderr, want)
	}
}

// startTLSRedis starts a private redis-server that listens with TLS only,
// on a self-signed certificate, and returns its address; it is killed
// when t ends.
func startTLSRedis(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", "0", "--tls-port", port,
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-auth-clients", "no",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server with TLS: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, TLSConfig: &tls.Config{InsecureSkipVerify: true}})
	defer rdb.Close()
	testenv.Eventually(t, 10*time.Second, "redis-server with TLS on "+addr+" to answer", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := rdb.Ping(ctx).Err(); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return fmt.Errorf("%w\n%s", err, log)
		}
		return nil
	})
	return addr
}
