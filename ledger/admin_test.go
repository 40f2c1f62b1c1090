package ledger_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"tally/ledger"
)

// This file tests admin_actions (migration 00012): what each change to
// the catalog records, as whom, that a change that changes nothing records
// nothing, that nobody edits the record, and its paging
// (admin_privilege_test.go: what the logins may do).

// actions reads every recorded action, oldest first.
func actions(t *testing.T, b bundle) []ledger.AdminAction {
	t.Helper()
	as, err := b.store.AdminActions(b.ctx, 0, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// brief is an action as "principal_id db_user action target".
func brief(a ledger.AdminAction) string {
	return strings.Join([]string{a.PrincipalID, a.DBUser, a.Action, a.Target}, " ")
}

// detail is an action's detail, decoded.
func detail(t *testing.T, a ledger.AdminAction) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(a.Detail, &d); err != nil {
		t.Fatalf("action %d's detail %s: %v", a.ID, a.Detail, err)
	}
	return d
}

// detailTime is a time in an action's detail; nil for JSON null.
func detailTime(t *testing.T, a ledger.AdminAction, key string) *time.Time {
	t.Helper()
	v, ok := detail(t, a)[key]
	if !ok {
		t.Fatalf("action %d's detail %s has no %s", a.ID, a.Detail, key)
	}
	if v == nil {
		return nil
	}
	s, _ := v.(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("action %d's %s: %v", a.ID, key, err)
	}
	return &at
}

// sessionUser is the database login of b's store.
func sessionUser(t *testing.T, b bundle) string {
	t.Helper()
	var u string
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT session_user`).Scan(&u); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestAdminActionsRecordEachChange makes each kind of change as a
// principal (ActingAs) and once without, and reads back one row a
// change, as whom and with what detail; a close, a revoke or a retire
// that changes nothing records nothing.
func TestAdminActionsRecordEachChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	login := sessionUser(t, b)
	as := ledger.ActingAs(b.ctx, "p-admin")
	opens := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	closes := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if err := b.store.CreatePoll(as, ledger.Poll{ID: "lunch", Title: "Lunch?", OpensAt: opens, Choices: []string{"a", "b"},
		Eligible: []string{"u1"}, PublicResults: true}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second close changes nothing
		if err := b.store.ClosePoll(as, "lunch", closes); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.store.ClosePoll(as, "lunch", closes.Add(time.Hour)); err != nil { // later: the earlier time is kept
		t.Fatal(err)
	}
	earlier := closes.Add(-time.Minute)
	if err := b.store.ClosePoll(as, "lunch", earlier); err != nil {
		t.Fatal(err)
	}
	ps, err := b.store.AddPrincipals(as, []string{"ann", "bob"}, ledger.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.store.RevokePrincipal(as, ps[1].ID); err != nil {
			t.Fatal(err)
		}
		if err := b.store.RevokePrincipal(as, "o-subject"); err != nil { // no row until revoked
			t.Fatal(err)
		}
		if err := b.store.RetireCredentialKey(as, "k-0011223344556677"); err != nil {
			t.Fatal(err)
		}
	}
	// Without ActingAs, or acting as nobody: the login alone.
	if err := b.store.CreatePoll(b.ctx, ledger.Poll{ID: "cli", Title: "From the CLI", Choices: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.AddPrincipals(ledger.ActingAs(b.ctx, ""), []string{"carol"}, ""); err != nil {
		t.Fatal(err)
	}

	got := actions(t, b)
	sorted := slices.Sorted(slices.Values([]string{ps[0].ID, ps[1].ID})) // one statement's rows, by id
	want := []string{
		"p-admin " + login + " poll.create lunch",
		"p-admin " + login + " poll.close lunch",
		"p-admin " + login + " poll.close lunch",
		"p-admin " + login + " principal.add " + sorted[0],
		"p-admin " + login + " principal.add " + sorted[1],
		"p-admin " + login + " principal.revoke " + ps[1].ID,
		"p-admin " + login + " principal.revoke o-subject",
		"p-admin " + login + " credential_key.retire k-0011223344556677",
		" " + login + " poll.create cli",
	}
	var briefs []string
	for i, a := range got {
		briefs = append(briefs, brief(a))
		if a.At.IsZero() || (i > 0 && (a.ID <= got[i-1].ID || a.At.Before(got[i-1].At))) {
			t.Errorf("action %d (id %d at %s) does not follow the one before", i, a.ID, a.At)
		}
	}
	if len(briefs) != len(want)+1 || !slices.Equal(briefs[:len(want)], want) || !strings.HasPrefix(briefs[len(want)], " "+login+" principal.add p-") {
		t.Fatalf("admin_actions:\n %s\nwant\n %s\n and carol's principal.add by the login alone", strings.Join(briefs, "\n "), strings.Join(want, "\n "))
	}

	create := detail(t, got[0])
	if create["eligibility"] != ledger.EligibleList || create["public_results"] != true || create["closes_at"] != nil ||
		!detailTime(t, got[0], "opens_at").Equal(opens) {
		t.Errorf("poll.create detail %s, want the poll's window, eligibility list and public results", got[0].Detail)
	}
	if c, was := detailTime(t, got[1], "closes_at"), detailTime(t, got[1], "was"); c == nil || !c.Equal(closes) || was != nil {
		t.Errorf("first poll.close detail %s, want closes_at %s and was null", got[1].Detail, closes.Format(time.RFC3339))
	}
	if c, was := detailTime(t, got[2], "closes_at"), detailTime(t, got[2], "was"); c == nil || !c.Equal(earlier) || was == nil || !was.Equal(closes) {
		t.Errorf("second poll.close detail %s, want closes_at %s and was %s", got[2].Detail,
			earlier.Format(time.RFC3339), closes.Format(time.RFC3339))
	}
	for _, i := range []int{3, 4, 5} {
		if role := detail(t, got[i])["role"]; role != ledger.RoleAdmin {
			t.Errorf("%s detail %s, want role admin", got[i].Action, got[i].Detail)
		}
	}
	if role := detail(t, got[len(got)-1])["role"]; role != ledger.RoleVoter {
		t.Errorf("carol's principal.add detail %s, want role voter", got[len(got)-1].Detail)
	}
	if string(got[7].Detail) != "{}" {
		t.Errorf("credential_key.retire detail %s, want {}", got[7].Detail)
	}
}

// TestActingAsEndsWithItsTransaction: on a pool of one connection, a
// change made as a principal and then one made without ActingAs: the
// second is not recorded as the first's principal.
func TestActingAsEndsWithItsTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	one, _ := b.ownStore(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	if _, err := one.AddPrincipals(ledger.ActingAs(b.ctx, "p-first"), []string{"a"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := one.AddPrincipals(b.ctx, []string{"b"}, ""); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range actions(t, b) {
		got = append(got, brief(a))
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "p-first ") || !strings.HasPrefix(got[1], " ") {
		t.Fatalf("actions %q, want the first by p-first and the second by nobody", got)
	}
}

// TestAdminActionsThousandPrincipals: one AddPrincipals of 1,000 names
// records 1,000 rows, one a principal.
func TestAdminActionsThousandPrincipals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("voter %d", i)
	}
	ps, err := b.store.AddPrincipals(ledger.ActingAs(b.ctx, "p-bulk"), names, "")
	if err != nil {
		t.Fatal(err)
	}
	got := actions(t, b)
	if len(got) != len(ps) {
		t.Fatalf("%d actions for %d principals added", len(got), len(ps))
	}
	targets := map[string]bool{}
	for _, a := range got {
		if a.Action != "principal.add" || a.PrincipalID != "p-bulk" {
			t.Fatalf("action %s", brief(a))
		}
		targets[a.Target] = true
	}
	for _, p := range ps {
		if !targets[p.ID] {
			t.Fatalf("no principal.add of %s among %d actions", p.ID, len(got))
		}
	}
}

// adminActionsDigest is every row of admin_actions, read by the owner.
func adminActionsDigest(t *testing.T, b bundle) string {
	t.Helper()
	var d string
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) || ':' || md5(coalesce(string_agg(a::text, ',' ORDER BY a.id), ''))
FROM admin_actions a`).Scan(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestAdminActionsAppendOnly: UPDATE, DELETE and TRUNCATE of admin_actions
// are refused, even to the owner, as append-only, and change nothing.
func TestAdminActionsAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p", "a")
	if _, err := b.store.AddPrincipals(b.ctx, []string{"ann"}, ""); err != nil {
		t.Fatal(err)
	}
	before := adminActionsDigest(t, b)
	if !strings.HasPrefix(before, "2:") {
		t.Fatalf("admin_actions %s, want 2 rows to tamper with", before)
	}
	for _, stmt := range []string{
		`UPDATE admin_actions SET principal_id = 'p-mallory'`,
		`UPDATE admin_actions SET detail = '{}' WHERE action = 'principal.add'`,
		`DELETE FROM admin_actions`,
		`DELETE FROM admin_actions WHERE action = 'poll.create'`,
		`TRUNCATE admin_actions`,
	} {
		_, err := b.db.Pool.Exec(b.ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("%s as the owner: %v, want 42501 saying admin_actions is append-only", stmt, err)
		}
	}
	if after := adminActionsDigest(t, b); after != before {
		t.Errorf("admin_actions changed: before %s, after %s", before, after)
	}
}

// TestAdminActionsPaging reads the record a page at a time: the pages
// join into the whole, in order; a limit below 1 is ErrInvalid.
func TestAdminActionsPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.store.AddPrincipals(b.ctx, []string{"a", "b", "c", "d", "e"}, ""); err != nil {
		t.Fatal(err)
	}
	all := actions(t, b)
	if len(all) != 5 {
		t.Fatalf("%d actions, want 5", len(all))
	}
	for _, limit := range []int{1, 2, 4, 5, 6} {
		var joined []ledger.AdminAction
		after := int64(0)
		for pages := 0; ; pages++ {
			page, err := b.store.AdminActions(b.ctx, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > limit || pages > len(all) {
				t.Fatalf("limit %d: a page of %d after %d pages", limit, len(page), pages)
			}
			if len(page) == 0 {
				break
			}
			joined = append(joined, page...)
			after = page[len(page)-1].ID
		}
		if len(joined) != len(all) || !slices.EqualFunc(joined, all, func(x, y ledger.AdminAction) bool { return x.ID == y.ID }) {
			t.Errorf("limit %d: pages joined into %d actions, want the %d read at once, in order", limit, len(joined), len(all))
		}
	}
	if page, err := b.store.AdminActions(b.ctx, all[2].ID, 100); err != nil || len(page) != 2 || page[0].ID != all[3].ID {
		t.Errorf("after the third action: %d actions, %v; want the fourth and the fifth", len(page), err)
	}
	if page, err := b.store.AdminActions(b.ctx, all[4].ID, 100); err != nil || len(page) != 0 {
		t.Errorf("after the last action: %+v, %v; want none", page, err)
	}
	for _, limit := range []int{0, -1} {
		if _, err := b.store.AdminActions(b.ctx, 0, limit); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("AdminActions with limit %d: %v, want ErrInvalid", limit, err)
		}
	}
}
