// Package testenv gives tests real, isolated servers: a fresh PostgreSQL
// database cloned from a migrated template, a unique Redis key prefix on the
// shared Redis, or a private redis-server the test may kill and restart.
//
// The shared servers come from TALLY_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres) and TALLY_TEST_REDIS_URL
// (default redis://127.0.0.1:6379/0). Everything a test creates is removed
// in t.Cleanup.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"tally/migrations"
)

// DatabaseURL is the admin URL of the shared PostgreSQL.
func DatabaseURL() string {
	if u := os.Getenv("TALLY_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// RedisURL is the URL of the shared Redis.
func RedisURL() string {
	if u := os.Getenv("TALLY_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// RandomName returns prefix followed by 12 random hex digits.
func RandomName(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// templateDB creates, once per test binary, a database with the
// migrations applied, from which Postgres clones each test's database.
// DropTemplate removes it when the binary's tests are done.
func templateDB(ctx context.Context) (string, error) {
	templateOnce.Do(func() {
		templateName = fmt.Sprintf("tally_tpl_%d_%s", os.Getpid(), RandomName(""))
		templateErr = createTemplate(ctx, templateName)
	})
	return templateName, templateErr
}

func createTemplate(ctx context.Context, name string) error {
	admin, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		return fmt.Errorf("connect to the test PostgreSQL at %s (set TALLY_TEST_DATABASE_URL): %w", DatabaseURL(), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	db, err := sql.Open("pgx", withDatabase(DatabaseURL(), name))
	if err != nil {
		return err
	}
	if err := migrations.Up(ctx, db); err != nil {
		db.Close()
		return err
	}
	db.Close()
	_, err = admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` WITH is_template true`)
	return err
}

// DropTemplate drops the template database of this test binary, if one was
// made. Call it from TestMain after m.Run (see Main).
func DropTemplate() {
	if templateName == "" || templateErr != nil {
		return
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	id := pgx.Identifier{templateName}.Sanitize()
	admin.Exec(ctx, `ALTER DATABASE `+id+` WITH is_template false`)
	admin.Exec(ctx, `DROP DATABASE IF EXISTS `+id+` WITH (FORCE)`)
}

// Main runs the tests of a package, drops the template database and, when
// they passed, fails the run if any goroutine is left behind (goleak): a
// daemon that does not stop when its context ends is a bug. Use it as
// func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }.
func Main(m *testing.M, opts ...goleak.Option) int {
	code := m.Run()
	DropTemplate()
	if code != 0 {
		return code
	}
	if err := goleak.Find(opts...); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: goroutines still running after the tests passed: %v\n", err)
		return 1
	}
	return 0
}

var _ = stdlib.GetDefaultDriver // registers the "pgx" database/sql driver

// withDatabase returns the connection string dsn with its database
// replaced by db. It takes both forms pgx does: a URL (whose user,
// password, host list and query are kept as they are) and a keyword/value
// string ("host=... user=..."), where a later key overrides an earlier one.
func withDatabase(dsn, db string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			panic(fmt.Sprintf("testenv: database URL: %v", err))
		}
		u.Path, u.RawPath = "/"+db, ""
		return u.String()
	}
	return dsn + " dbname=" + db
}

// DB is a fresh, migrated database of one test.
type DB struct {
	Name string
	URL  string
	Pool *pgxpool.Pool
}

// Postgres creates a fresh migrated database for t, and drops it when t
// ends.
func Postgres(t testing.TB) DB {
	t.Helper()
	ctx := context.Background()
	tpl, err := templateDB(ctx)
	if err != nil {
		t.Fatalf("test template database: %v", err)
	}
	name := RandomName("tally_test_")
	admin, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		t.Fatalf("connect to the test PostgreSQL: %v", err)
	}
	defer admin.Close(ctx)
	create := `CREATE DATABASE ` + pgx.Identifier{name}.Sanitize() + ` TEMPLATE ` + pgx.Identifier{tpl}.Sanitize()
	for attempt := 0; ; attempt++ {
		_, err = admin.Exec(ctx, create)
		var pgErr *pgconn.PgError
		// 55006: the template is in use by another clone for a moment.
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || attempt > 50 {
			break
		}
		time.Sleep(time.Duration(20+attempt*10) * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create test database: %v", err)
	}
	return open(t, name)
}

// open connects to the test database name and drops it when t ends.
func open(t testing.TB, name string) DB {
	t.Helper()
	url := withDatabase(DatabaseURL(), name)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		DropDatabase(t, name)
	})
	return DB{Name: name, URL: url, Pool: pool}
}

// DropDatabase drops a test database, closing any connection left to it.
func DropDatabase(t testing.TB, name string) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		t.Errorf("drop test database %s: %v", name, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		t.Errorf("drop test database %s: %v", name, err)
	}
}

// Redis returns a client of the shared Redis and a key prefix unique to t;
// every key under the prefix's hash tags is deleted when t ends.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("TALLY_TEST_REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("connect to the test Redis at %s (set TALLY_TEST_REDIS_URL): %v", RedisURL(), err)
	}
	prefix := RandomName("t")
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, "{"+prefix+":*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		rdb.Close()
	})
	return rdb, prefix
}

// EmptyPostgres creates an empty database (no migrations) for t, and drops
// it when t ends.
func EmptyPostgres(t testing.TB) DB {
	t.Helper()
	ctx := context.Background()
	name := RandomName("tally_test_")
	admin, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		t.Fatalf("connect to the test PostgreSQL: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	return open(t, name)
}
