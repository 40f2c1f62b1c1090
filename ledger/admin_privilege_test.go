package ledger_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"tally/internal/testenv"
	"tally/ledger"
)

// This file tests what the logins of migration 00012 may do to the
// catalog: tally_admin's column grants, and tally_daemon's none.

// TestAdminLogin: a login granted tally_admin makes each change through
// the ledger, recorded under its name, but may neither write
// admin_actions itself nor change what a poll asks; a login granted
// tally_daemon alone may make none of the changes.
func TestAdminLogin(t *testing.T) {
	t.Parallel()
	owner := setup(t)
	owner.poll(t, "old", "a")
	admin := storeAs(t, owner, testenv.AdminLogin(t, owner.db))
	login := sessionUser(t, admin)
	as := ledger.ActingAs(admin.ctx, "p-app")
	if err := admin.store.CreatePoll(as, ledger.Poll{ID: "new", Title: "New?", Choices: []string{"x", "y"}}); err != nil {
		t.Fatalf("create a poll as tally_admin: %v", err)
	}
	if err := admin.store.ClosePoll(as, "new", time.Now()); err != nil {
		t.Fatalf("close a poll as tally_admin: %v", err)
	}
	ps, err := admin.store.AddPrincipals(as, []string{"ann"}, ledger.RoleAdmin)
	if err != nil {
		t.Fatalf("add principals as tally_admin: %v", err)
	}
	for _, id := range []string{ps[0].ID, "o-subject"} {
		if err := admin.store.RevokePrincipal(as, id); err != nil {
			t.Fatalf("revoke %s as tally_admin: %v", id, err)
		}
	}
	if err := admin.store.RetireCredentialKey(as, "k-0011223344556677"); err != nil {
		t.Fatalf("retire a key as tally_admin: %v", err)
	}
	want := []string{"poll.create new", "poll.close new", "principal.add " + ps[0].ID, "principal.revoke " + ps[0].ID,
		"principal.revoke o-subject", "credential_key.retire k-0011223344556677"}
	var got []string
	for _, a := range actions(t, admin)[1:] { // after the owner's poll old
		if a.PrincipalID != "p-app" || a.DBUser != login {
			t.Errorf("action %s, want it by p-app through %s", brief(a), login)
		}
		got = append(got, a.Action+" "+a.Target)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("actions through tally_admin %v, want %v", got, want)
	}

	before := adminActionsDigest(t, owner)
	for _, stmt := range []string{
		`INSERT INTO admin_actions (db_user, action, target) VALUES ('someone', 'poll.create', 'fake')`,
		`UPDATE polls SET title = 'Changed?' WHERE id = 'old'`,
		`UPDATE poll_choices SET candidate_id = 'z'`,
		`DELETE FROM polls WHERE id = 'old'`,
		`UPDATE principals SET role = 'admin'`,
	} {
		_, err := admin.db.Pool.Exec(admin.ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("%s as tally_admin: %v, want permission denied (42501)", stmt, err)
		}
	}
	if after := adminActionsDigest(t, owner); after != before {
		t.Errorf("admin_actions changed under tally_admin: before %s, after %s", before, after)
	}
	if p, err := owner.store.Poll(owner.ctx, "old"); err != nil || p.Title != "poll old" {
		t.Errorf("poll old after tally_admin's UPDATE: %+v, %v; want its title unchanged", p, err)
	}

	daemon := storeAs(t, owner, testenv.DaemonLogin(t, owner.db))
	for what, err := range map[string]error{
		"create a poll":  daemon.store.CreatePoll(daemon.ctx, ledger.Poll{ID: "nope", Title: "No", Choices: []string{"a"}}),
		"close a poll":   daemon.store.ClosePoll(daemon.ctx, "old", time.Now()),
		"add principals": func() error { _, err := daemon.store.AddPrincipals(daemon.ctx, []string{"x"}, ""); return err }(),
		"revoke":         daemon.store.RevokePrincipal(daemon.ctx, "o-other"),
		"retire a key":   daemon.store.RetireCredentialKey(daemon.ctx, "k-ffffffffffffffff"),
	} {
		if !errors.Is(err, ledger.ErrNotPermitted) {
			t.Errorf("%s as tally_daemon: %v, want ErrNotPermitted", what, err)
		}
	}
	if after := adminActionsDigest(t, owner); after != before {
		t.Errorf("admin_actions changed under tally_daemon: before %s, after %s", before, after)
	}
}

// storeAs is a bundle on owner's database logged in at url (a login of
// testenv), whose pool closes before the login is dropped.
func storeAs(t *testing.T, owner bundle, url string) bundle {
	t.Helper()
	store, pool := storeOn(t, url, nil)
	return bundle{db: testenv.DB{Name: owner.db.Name, URL: url, Pool: pool}, store: store, ctx: owner.ctx}
}
