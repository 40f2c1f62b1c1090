package testenv

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// DaemonLogin makes a LOGIN role granted tally_daemon (migration 00006),
// as docs/operations.md has the operator do for the daemons, and returns
// db's URL logged in as it: tally intake and tally projector refuse to
// start as a superuser or the database's owner. The role is dropped when
// t ends, after the cleanups registered later (the daemons' stops).
func DaemonLogin(t testing.TB, db DB) string {
	t.Helper()
	return login(t, db, "tally_daemon")
}

// AdminLogin is DaemonLogin granted tally_admin (migration 00012): the
// login of an intake that serves the admin routes.
func AdminLogin(t testing.TB, db DB) string {
	t.Helper()
	return login(t, db, "tally_admin")
}

func login(t testing.TB, db DB, granted string) string {
	t.Helper()
	role := RandomName(granted + "_test_")
	if _, err := db.Pool.Exec(context.Background(), `CREATE ROLE `+pgx.Identifier{role}.Sanitize()+` LOGIN IN ROLE `+
		pgx.Identifier{granted}.Sanitize()); err != nil {
		t.Fatalf("create a login granted %s: %v", granted, err)
	}
	t.Cleanup(func() {
		if _, err := db.Pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Logf("drop the login %s: %v", role, err)
		}
	})
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}
