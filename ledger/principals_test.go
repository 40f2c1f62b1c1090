package ledger_test

import (
	"errors"
	"strings"
	"testing"

	"tally/ledger"
)

// TestAddPrincipals: many principals in one call, each with a distinct id,
// no stored token, and the creation time the database gave them; a bad
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
	var stored, tokens int
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*), count(token_sha256) FROM principals`).Scan(&stored, &tokens); err != nil {
		t.Fatal(err)
	}
	if stored != len(names) || tokens != 0 {
		t.Fatalf("%d principals stored with %d tokens, want %d with none", stored, tokens, len(names))
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

// TestForgetStoredToken: after a reissue the token of the stored kind no
// longer authenticates; a revoked principal is not reissued.
func TestForgetStoredToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, token, err := b.store.AddPrincipal(b.ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Authenticate(b.ctx, token); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.ForgetStoredToken(b.ctx, p.ID)
	if err != nil || got.ID != p.ID || !got.CreatedAt.Equal(p.CreatedAt) {
		t.Fatalf("ForgetStoredToken: %+v, %v", got, err)
	}
	if _, err := b.store.Authenticate(b.ctx, token); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the old token after a reissue: %v, want ErrNotFound", err)
	}
	if err := b.store.RevokePrincipal(b.ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.ForgetStoredToken(b.ctx, p.ID); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("reissuing a revoked principal: %v, want ErrInvalid", err)
	}
	if _, err := b.store.ForgetStoredToken(b.ctx, "p-nobody"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("reissuing nobody: %v, want ErrNotFound", err)
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
