package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"tally/credential"
	"tally/internal/testenv"
	"tally/ledger"
)

// tally principal list shows what add and revoke did, in both formats;
// revoking an unknown principal says how to find the known ones.
func TestPrincipalCommands(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	r := tally(t, db.URL, "principal", "add", "ci-bot", "--credential-key", credentialKeyFile(t))
	if r.code != 0 || !strings.Contains(r.stderr, "added principal ") {
		t.Fatalf("principal add: %+v", r)
	}
	id := regexp.MustCompile(`added principal (\S+) \(ci-bot, voter\)`).FindStringSubmatch(r.stderr)
	if id == nil {
		t.Fatalf("principal add named no id: %q", r.stderr)
	}
	if r := tally(t, db.URL, "principal", "revoke", id[1]); r.code != 0 || r.stderr != "revoked principal "+id[1]+"\n" {
		t.Fatalf("principal revoke: %+v", r)
	}
	if r := tally(t, db.URL, "principal", "revoke", "nobody"); r.code != 2 || !strings.Contains(r.stderr, "no principal nobody (tally principal list shows them)") {
		t.Fatalf("revoke of an unknown principal: %+v", r)
	}
	r = tally(t, db.URL, "principal", "list")
	if r.code != 0 || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(id[1])+`\s+ci-bot\s+voter\s+\S+Z\s+\S+Z\s*$`).MatchString(r.stdout) {
		t.Fatalf("principal list after revoke: %+v; want the principal with its revocation time", r)
	}
	r = tally(t, db.URL, "principal", "list", "--format", "json")
	var ps []struct {
		ID        string  `json:"id"`
		Name      string  `json:"name"`
		RevokedAt *string `json:"revoked_at"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ps); err != nil || r.code != 0 {
		t.Fatalf("principal list --format json: %+v (%v)", r, err)
	}
	if len(ps) != 1 || ps[0].ID != id[1] || ps[0].Name != "ci-bot" || ps[0].RevokedAt == nil {
		t.Fatalf("principal list --format json: %+v, want ci-bot revoked", ps)
	}
	if r := tally(t, db.URL, "principal", "add"); r.code != 2 || !strings.Contains(r.stderr, "give the principal's NAME") {
		t.Fatalf("principal add without a name: %+v", r)
	}
	if r := tally(t, db.URL, "principal", "add", "no-key"); r.code != 2 || !strings.Contains(r.stderr, "tally credential key generate") {
		t.Fatalf("principal add without a credential key: %+v; want it to say how to make one", r)
	}
}

// credentialKeyFile is a new credential key's file, made by tally
// credential key generate.
func credentialKeyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credential.key")
	r := offline(t, "", "credential", "key", "generate", "--out", path)
	if r.code != 0 || !regexp.MustCompile(`^k-[0-9a-f]{16}\n$`).MatchString(r.stdout) {
		t.Fatalf("credential key generate: %+v; want the key id alone on stdout", r)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v %v, want mode 0600", st, err)
	}
	return path
}

// TestPrincipalAddFrom: principals added from a file, written as CSV to a
// file of mode 0600, each token verifying to its principal with the key;
// with --expires, tokens that expire; reissue gives a principal a token
// valid from the reissue on.
func TestPrincipalAddFrom(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	keyFile := credentialKeyFile(t)
	key, err := credential.ReadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	set, _ := credential.NewKeySet(key)
	v := credential.NewVerifier(set)
	dir := t.TempDir()
	names := filepath.Join(dir, "names.txt")
	const n = 500
	var list strings.Builder
	for i := range n {
		fmt.Fprintf(&list, "voter, number %d\n", i) // a comma, quoted in the CSV
		if i%100 == 0 {
			list.WriteString("\n")
		}
	}
	if err := os.WriteFile(names, []byte(list.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tokens.csv")
	r := tally(t, db.URL, "principal", "add", "--from", names, "--out", out, "--expires", "720h", "--credential-key", keyFile)
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, fmt.Sprintf("added %d principals", n)) {
		t.Fatalf("principal add --from: %+v", r)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the CSV file: %v %v, want mode 0600", st, err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != n+1 || strings.Join(rows[0], ",") != "name,principal_id,token" {
		t.Fatalf("%d rows, header %v; want %d and name,principal_id,token", len(rows), rows[0], n+1)
	}
	ids := map[string]bool{}
	for i, row := range rows[1:] {
		id, err := v.Verify(context.Background(), row[2])
		if err != nil || id.PrincipalID != row[1] || row[0] != fmt.Sprintf("voter, number %d", i) || ids[row[1]] {
			t.Fatalf("row %d %v: %+v %v", i+1, row, id, err)
		}
		if d := time.Until(id.ExpiresAt); d < 719*time.Hour || d > 721*time.Hour {
			t.Fatalf("row %d expires in %s, want 720h", i+1, d)
		}
		ids[row[1]] = true
	}
	if r := tally(t, db.URL, "principal", "add", "--from", names, "--out", out, "--credential-key", keyFile); r.code != 2 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("a second add to the same --out: %+v; want a refusal to replace it", r)
	}
	for _, bad := range []string{"-1h", "yesterday", "2001-01-01T00:00:00Z"} {
		if r := tally(t, db.URL, "principal", "add", "x", "--expires", bad, "--credential-key", keyFile); r.code != 2 || !strings.Contains(r.stderr, "--expires") {
			t.Fatalf("--expires %s: %+v", bad, r)
		}
	}

	// Reissue: a principal gets a new signed token.
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := signedToken(t, store, keyFile, "old")
	r = tally(t, db.URL, "principal", "reissue", p.ID, "--credential-key", keyFile)
	if r.code != 0 {
		t.Fatalf("principal reissue: %+v", r)
	}
	if id, err := v.Verify(context.Background(), strings.TrimSpace(r.stdout)); err != nil || id.PrincipalID != p.ID || !id.ExpiresAt.IsZero() {
		t.Fatalf("the reissued token: %+v %v", id, err)
	}
	// The new token is issued at the time from which the principal's
	// tokens are valid, so intake takes it and refuses every earlier one.
	id, _ := v.Verify(context.Background(), strings.TrimSpace(r.stdout))
	if rev, err := store.Revocations(context.Background()); err != nil || !rev.ValidAfter[p.ID].Equal(id.IssuedAt) {
		t.Fatalf("the reissued token was issued at %v; the principal's tokens are valid after %v (%v)", id.IssuedAt, rev.ValidAfter[p.ID], err)
	}

	r = offline(t, "", "principal", "id", "--issuer", "https://id.example.org", "--subject", "alice")
	if r.code != 0 || r.stdout != credential.PrincipalIDFor("https://id.example.org", "alice")+"\n" {
		t.Fatalf("principal id: %+v", r)
	}
}

// TestPrincipalRevokeMinted: revoke --minted revokes the admin and what it
// minted over HTTP, down the chain, and says how many; list --format json
// names who minted each; without --minted the minted stay.
func TestPrincipalRevokeMinted(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	add := func(ctx context.Context, name, role string) ledger.Principal {
		ps, err := store.AddPrincipals(ctx, []string{name}, role)
		if err != nil {
			t.Fatal(err)
		}
		return ps[0]
	}
	admin := add(ctx, "app", ledger.RoleAdmin)
	minted := add(ledger.ActingAs(ctx, admin.ID), "minted", ledger.RoleAdmin)
	voter := add(ledger.ActingAs(ctx, minted.ID), "voter", ledger.RoleVoter)
	other := add(ctx, "other", ledger.RoleAdmin)
	kept := add(ledger.ActingAs(ctx, other.ID), "kept", ledger.RoleVoter)

	r := tally(t, db.URL, "principal", "list", "--format", "json")
	var ps []principalJSON
	if err := json.Unmarshal([]byte(r.stdout), &ps); err != nil || r.code != 0 {
		t.Fatalf("principal list --format json: %+v (%v)", r, err)
	}
	for _, p := range ps {
		if p.ID == voter.ID && (p.CreatedBy == nil || *p.CreatedBy != minted.ID) {
			t.Fatalf("principal list names the voter's minter %v, want %s", p.CreatedBy, minted.ID)
		}
	}

	if r := tally(t, db.URL, "principal", "revoke", other.ID); r.code != 0 {
		t.Fatalf("principal revoke: %+v", r)
	}
	if r := tally(t, db.URL, "principal", "revoke", "--minted", admin.ID); r.code != 0 ||
		!strings.Contains(r.stderr, "revoked 2 principals "+admin.ID+" minted") {
		t.Fatalf("principal revoke --minted: %+v; want 2 minted revoked", r)
	}
	for p, want := range map[string]bool{admin.ID: true, minted.ID: true, voter.ID: true, other.ID: true, kept.ID: false} {
		got, err := store.Principal(ctx, p)
		if err != nil || (got.RevokedAt != nil) != want {
			t.Errorf("%s (%s): revoked at %v (%v), want revoked %v", p, got.Name, got.RevokedAt, err, want)
		}
	}

	// An OpenID Connect subject revoked is listed with no made-up role.
	subject := credential.PrincipalIDFor("https://id.example.org", "alice")
	if r := tally(t, db.URL, "principal", "revoke", subject); r.code != 0 {
		t.Fatalf("principal revoke %s: %+v", subject, r)
	}
	r = tally(t, db.URL, "principal", "list")
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(subject) + `\s+OpenID Connect subject\s+\(issuer's\)\s`).MatchString(r.stdout) {
		t.Fatalf("principal list: %+v; want the OpenID Connect subject with the role (issuer's)", r)
	}
	r = tally(t, db.URL, "principal", "list", "--format", "json")
	ps = nil
	if err := json.Unmarshal([]byte(r.stdout), &ps); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.ID == subject && p.Role != nil {
			t.Fatalf("principal list --format json gives the OpenID Connect subject the role %q, want null", *p.Role)
		}
	}
}

// signedToken adds a principal named name to store and returns a token
// for it signed with the key of keyFile, which intake takes with
// --credential-key keyFile.
func signedToken(t *testing.T, store *ledger.Store, keyFile, name string) (ledger.Principal, string) {
	t.Helper()
	key, err := credential.ReadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := store.AddPrincipals(context.Background(), []string{name}, "")
	if err != nil {
		t.Fatal(err)
	}
	token, err := key.Issue(ps[0].ID, ps[0].CreatedAt, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return ps[0], token
}
