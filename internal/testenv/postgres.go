package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sethvargo/go-retry"

	"tally/migrations"
)

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
	if err := cloneTemplate(ctx, admin, name, tpl); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	return open(t, name)
}

// cloneTemplate creates database name from the template tpl. PostgreSQL
// refuses the clone while another session uses the template (55006), as
// a parallel test's clone does for a moment: it tries again, waiting from
// 20ms doubling up to 500ms, for at most 15s.
func cloneTemplate(ctx context.Context, admin *pgx.Conn, name, tpl string) error {
	create := `CREATE DATABASE ` + pgx.Identifier{name}.Sanitize() + ` TEMPLATE ` + pgx.Identifier{tpl}.Sanitize()
	b := retry.WithMaxDuration(15*time.Second,
		retry.WithCappedDuration(500*time.Millisecond, retry.NewExponential(20*time.Millisecond)))
	return retry.Do(ctx, b, func(ctx context.Context) error {
		_, err := admin.Exec(ctx, create)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" {
			return retry.RetryableError(err)
		}
		return err
	})
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
