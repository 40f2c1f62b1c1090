package cli

import (
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	ucli "github.com/urfave/cli/v2"

	"tally/ledger"
	"tally/migrations"
)

func migrateCommand() *ucli.Command {
	sub := func(name, usage, argsUsage string, action ucli.ActionFunc) *ucli.Command {
		return &ucli.Command{Name: name, Usage: usage, ArgsUsage: argsUsage, Flags: commonFlags(), Action: action}
	}
	return &ucli.Command{
		Name:  "migrate",
		Usage: "apply or roll back the database schema (goose migrations embedded in tally)",
		Subcommands: []*ucli.Command{
			sub("up", "apply every pending migration (creates the database when missing)", "", migrateUp),
			sub("down", "roll back the newest migration", "", migrateDown),
			sub("down-to", "roll back to VERSION (0 removes everything)", "VERSION", migrateDownTo),
			sub("reset", "roll back every migration: drops all of tally's tables, the ledger with them", "", migrateReset),
			sub("redo", "roll back the newest migration and apply it again", "", migrateRedo),
			sub("status", "list the migrations and whether each is applied", "", migrateStatus),
			sub("version", "print the version the database is at", "", migrateVersion),
		},
	}
}

// migrateUp is tally migrate up; it creates the database when missing.
// Then it builds the Merkle log of every poll whose rows predate it
// (migration 00004 numbers the rows; hashing them is Go's work).
func migrateUp(c *ucli.Context) error {
	err := withProvider(c, true, func(p *goose.Provider) error {
		rs, err := p.Up(c.Context)
		printMigrations(c, rs...)
		return err
	})
	if err != nil {
		return err
	}
	return withStore(c, func(store *ledger.Store) error {
		n, err := store.BuildLogs(c.Context)
		if n > 0 {
			fmt.Fprintf(c.App.Writer, "built the Merkle logs of %d polls from their rows\n", n)
		}
		return err
	})
}

// migrateDown is tally migrate down.
func migrateDown(c *ucli.Context) error {
	return withProvider(c, false, func(p *goose.Provider) error {
		r, err := p.Down(c.Context)
		if r != nil {
			printMigrations(c, r)
		}
		return err
	})
}

// migrateDownTo is tally migrate down-to VERSION.
func migrateDownTo(c *ucli.Context) error {
	return withProvider(c, false, func(p *goose.Provider) error {
		v, err := versionArg(c)
		if err != nil {
			return err
		}
		rs, err := p.DownTo(c.Context, v)
		printMigrations(c, rs...)
		return err
	})
}

// migrateReset is tally migrate reset.
func migrateReset(c *ucli.Context) error {
	return withProvider(c, false, func(p *goose.Provider) error {
		rs, err := p.DownTo(c.Context, 0)
		printMigrations(c, rs...)
		return err
	})
}

// migrateRedo is tally migrate redo.
func migrateRedo(c *ucli.Context) error {
	return withProvider(c, false, func(p *goose.Provider) error {
		r, err := p.Down(c.Context)
		if err != nil {
			return err
		}
		r2, err := p.UpByOne(c.Context)
		printMigrations(c, r, r2)
		return err
	})
}

// migrateStatus is tally migrate status.
func migrateStatus(c *ucli.Context) error {
	return withProvider(c, false, func(p *goose.Provider) error {
		st, err := p.Status(c.Context)
		if err != nil {
			return err
		}
		t := newTable(c.App.Writer, "VERSION", "STATE", "APPLIED AT", "FILE")
		for _, s := range st {
			at := ""
			if !s.AppliedAt.IsZero() {
				at = s.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
			}
			t.row(strconv.FormatInt(s.Source.Version, 10), string(s.State), at, s.Source.Path)
		}
		return t.flush()
	})
}

// migrateVersion is tally migrate version.
func migrateVersion(c *ucli.Context) error {
	return withProvider(c, false, func(p *goose.Provider) error {
		v, err := p.GetDBVersion(c.Context)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.App.Writer, v)
		return nil
	})
}

// printMigrations prints one line per migration run, or "nothing to do" on
// standard error when none ran.
func printMigrations(c *ucli.Context, rs ...*goose.MigrationResult) {
	if len(rs) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "nothing to do")
	}
	for _, r := range rs {
		fmt.Fprintln(c.App.Writer, r.String())
	}
}

func versionArg(c *ucli.Context) (int64, error) {
	if c.NArg() != 1 {
		return 0, fmt.Errorf("give one VERSION, e.g. tally migrate down-to 1 (tally migrate status lists them)")
	}
	v, err := strconv.ParseInt(c.Args().First(), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("VERSION %q is not a migration version; tally migrate status lists them", c.Args().First())
	}
	return v, nil
}

// withProvider opens the database and runs fn with a goose provider on it.
// With create, a missing database is created first.
func withProvider(c *ucli.Context, create bool, fn func(*goose.Provider) error) error {
	dbURL := c.String(flagDatabaseURL.Name)
	if err := checkDatabaseScheme(dbURL); err != nil {
		return err
	}
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return fmt.Errorf("--database-url: %w", err)
	}
	if create {
		if err := createDatabaseIfMissing(c, cfg); err != nil {
			return err
		}
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := db.PingContext(c.Context); err != nil {
		return unreachablePostgres(dbURL, loginRefused(err))
	}
	p, err := migrations.NewProvider(db)
	if err != nil {
		return err
	}
	return fn(p)
}

// createDatabaseIfMissing creates cfg's database, connecting to the
// "postgres" database of the same server, when the server says it does not
// exist.
func createDatabaseIfMissing(c *ucli.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(c.Context, cfg)
	if err == nil {
		return conn.Close(c.Context)
	}
	if !ledger.IsMissingDatabase(err) {
		return nil // the ping that follows reports it
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(c.Context, admin)
	if err != nil {
		return fmt.Errorf("database %q does not exist, and connecting to database postgres to create it failed: %w", cfg.Database, err)
	}
	defer conn.Close(c.Context)
	if _, err := conn.Exec(c.Context, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize()); err != nil {
		return fmt.Errorf("create database %q: %w", cfg.Database, err)
	}
	fmt.Fprintf(c.App.ErrWriter, "created database %s\n", cfg.Database)
	return nil
}
