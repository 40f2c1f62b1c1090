package ledger_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"tally/ledger"
)

// TestAddPrincipals: many principals in one call, each with a distinct id
// and the creation time the database gave them; a bad
// name refuses the whole call and adds none.
func TestAddPrincipals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	names := make([]string, 2000)
	for i := range names {
		names[i] = "voter " + strings.Repeat("x", i%5)
	}
	ps, err := b.store.AddPrincipals(b.ctx, names, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, p := range ps {
		if p.Name != names[i] || seen[p.ID] || !strings.HasPrefix(p.ID, "p-") || p.CreatedAt.IsZero() {
			t.Fatalf("principal %d: %+v", i, p)
		}
		seen[p.ID] = true
	}
	var stored int
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM principals`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != len(names) {
		t.Fatalf("%d principals stored, want %d", stored, len(names))
	}
	got, err := b.store.Principal(b.ctx, ps[7].ID)
	if err != nil || !got.CreatedAt.Equal(ps[7].CreatedAt) {
		t.Fatalf("Principal: %+v, %v; want the creation time AddPrincipals gave, %s", got, err, ps[7].CreatedAt)
	}
	for _, bad := range [][]string{nil, {"ok", ""}, {strings.Repeat("n", 201)}} {
		if _, err := b.store.AddPrincipals(b.ctx, bad, ""); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("AddPrincipals(%d names): %v, want ErrInvalid", len(bad), err)
		}
	}
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM principals`).Scan(&stored); err != nil || stored != len(names) {
		t.Fatalf("%d principals after refused calls, want %d", stored, len(names))
	}
}

// TestRevocations: revoked principals and retired keys are read back, and
// only those; retiring a key twice changes nothing.
func TestRevocations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ps, err := b.store.AddPrincipals(b.ctx, []string{"a", "b", "c"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.RevokePrincipal(b.ctx, ps[1].ID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.store.RetireCredentialKey(b.ctx, "k-0011223344556677"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := b.store.Revocations(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Principals[ps[1].ID]; !ok || len(r.Principals) != 1 {
		t.Fatalf("revoked principals %v, want only %s", r.Principals, ps[1].ID)
	}
	if _, ok := r.Keys["k-0011223344556677"]; !ok || len(r.Keys) != 1 {
		t.Fatalf("retired keys %v", r.Keys)
	}
	// An OpenID Connect subject has no row until it is revoked; any other
	// unknown id is an error.
	if err := b.store.RevokePrincipal(b.ctx, "o-subject"); err != nil {
		t.Fatal(err)
	}
	if err := b.store.RevokePrincipal(b.ctx, "p-nobody"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("revoking nobody: %v, want ErrNotFound", err)
	}
	if r, err = b.store.Revocations(b.ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Principals["o-subject"]; !ok || len(r.Principals) != 2 {
		t.Fatalf("revoked principals %v, want the OpenID Connect subject too", r.Principals)
	}
}

// TestReissuePrincipal: after a reissue the revocations name the principal's
// valid-after time: a whole second later than any token issued before,
// and later again at each reissue; a revoked principal is not reissued,
// and admin_actions records each reissue.
func TestReissuePrincipal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ps, err := b.store.AddPrincipals(b.ctx, []string{"old"}, "")
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	before := time.Now()
	got, after, err := b.store.ReissuePrincipal(b.ctx, p.ID)
	if err != nil || got.ID != p.ID || !got.CreatedAt.Equal(p.CreatedAt) {
		t.Fatalf("ReissuePrincipal: %+v, %v", got, err)
	}
	if after.Truncate(time.Second) != after || !after.After(before) || after.After(time.Now().Add(time.Second)) {
		t.Fatalf("valid after %v, want the whole second after %v", after, before)
	}
	r, err := b.store.Revocations(b.ctx)
	if err != nil || !r.ValidAfter[p.ID].Equal(after) {
		t.Fatalf("revocations: %+v, %v; want %s valid after %v", r, err, p.ID, after)
	}
	_, again, err := b.store.ReissuePrincipal(b.ctx, p.ID)
	if err != nil || !again.After(after) {
		t.Fatalf("a second reissue: valid after %v, %v; want later than %v", again, err, after)
	}
	actions, err := b.store.AdminActions(b.ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	reissues := 0
	for _, a := range actions {
		if a.Action == "principal.reissue" && a.Target == p.ID {
			reissues++
		}
	}
	if reissues != 2 {
		t.Fatalf("admin_actions records %d reissues of %s, want 2: %+v", reissues, p.ID, actions)
	}
	if err := b.store.RevokePrincipal(b.ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.ReissuePrincipal(b.ctx, p.ID); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("reissuing a revoked principal: %v, want ErrInvalid", err)
	}
	if r, _ := b.store.Revocations(b.ctx); len(r.ValidAfter) != 0 {
		t.Fatalf("a revoked principal's valid-after time is held: %v", r.ValidAfter)
	}
	if _, _, err := b.store.ReissuePrincipal(b.ctx, "p-nobody"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("reissuing nobody: %v, want ErrNotFound", err)
	}
}

// TestRevokeMinted: a principal added by an admin through ActingAs
// records who minted it; revoking what an admin minted revokes its
// principals and theirs, down the chain, and no other, nor the admin
// itself; a second time revokes nothing more.
func TestRevokeMinted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	add := func(by, name, role string) ledger.Principal {
		t.Helper()
		ctx := b.ctx
		if by != "" {
			ctx = ledger.ActingAs(ctx, by)
		}
		ps, err := b.store.AddPrincipals(ctx, []string{name}, role)
		if err != nil {
			t.Fatal(err)
		}
		return ps[0]
	}
	root := add("", "root", ledger.RoleAdmin)
	minted := add(root.ID, "minted-admin", ledger.RoleAdmin)
	grandchild := add(minted.ID, "minted-voter", ledger.RoleVoter)
	sibling := add("", "operator's", ledger.RoleAdmin)
	other := add(sibling.ID, "sibling's voter", ledger.RoleVoter)

	got, err := b.store.Principal(b.ctx, grandchild.ID)
	if err != nil || got.CreatedBy != minted.ID {
		t.Fatalf("the voter the minted admin added: %+v (%v), want created by %s", got, err, minted.ID)
	}
	if got, _ := b.store.Principal(b.ctx, root.ID); got.CreatedBy != "" {
		t.Fatalf("a principal the operator added is recorded as made by %q", got.CreatedBy)
	}
	n, err := b.store.RevokeMinted(b.ctx, root.ID)
	if err != nil || n != 2 {
		t.Fatalf("RevokeMinted(root): %d, %v; want 2 revoked", n, err)
	}
	for p, want := range map[ledger.Principal]bool{root: false, minted: true, grandchild: true, sibling: false, other: false} {
		got, err := b.store.Principal(b.ctx, p.ID)
		if err != nil || (got.RevokedAt != nil) != want {
			t.Errorf("%s after RevokeMinted(root): revoked at %v (%v), want revoked %v", p.Name, got.RevokedAt, err, want)
		}
	}
	if n, err := b.store.RevokeMinted(b.ctx, root.ID); err != nil || n != 0 {
		t.Fatalf("RevokeMinted(root) again: %d, %v; want 0", n, err)
	}
}

// TestAddPrincipalsOnce: the same key with the same names and role adds
// the principals once and answers the same principals again; with other
// names, fewer, more or another role it adds nothing and is ErrKeyReused;
// another asker's same key is another request.
func TestAddPrincipalsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := ledger.ActingAs(b.ctx, "p-alice")
	first, replayed, err := b.store.AddPrincipalsOnce(alice, "k1", []string{"a", "b"}, "")
	if err != nil || replayed || len(first) != 2 {
		t.Fatalf("first: %v %v %v", first, replayed, err)
	}
	again, replayed, err := b.store.AddPrincipalsOnce(alice, "k1", []string{"a", "b"}, "")
	if err != nil || !replayed || len(again) != 2 || again[0] != first[0] || again[1] != first[1] {
		t.Fatalf("again: %+v %v %v, want %+v replayed", again, replayed, err, first)
	}
	for what, c := range map[string]struct {
		names []string
		role  string
	}{
		"other names": {[]string{"a", "c"}, ""}, "fewer": {[]string{"a"}, ""}, "more": {[]string{"a", "b", "c"}, ""},
		"another role": {[]string{"a", "b"}, ledger.RoleAdmin},
	} {
		if _, _, err := b.store.AddPrincipalsOnce(alice, "k1", c.names, c.role); !errors.Is(err, ledger.ErrKeyReused) {
			t.Errorf("%s: %v, want ErrKeyReused", what, err)
		}
	}
	bob, _, err := b.store.AddPrincipalsOnce(ledger.ActingAs(b.ctx, "p-bob"), "k1", []string{"a", "b"}, "")
	if err != nil || bob[0].ID == first[0].ID {
		t.Fatalf("another asker's key: %+v %v", bob, err)
	}
	if ps, err := b.store.Principals(b.ctx); err != nil || len(ps) != 4 {
		t.Fatalf("%d principals (%v), want 4", len(ps), err)
	}
	if _, _, err := b.store.AddPrincipalsOnce(alice, "", []string{"a"}, ""); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("no key: %v, want ErrInvalid", err)
	}
}
