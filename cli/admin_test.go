package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/credential"
	"tally/internal/testenv"
	"tally/ledger"
)

// This file tests the CLI's side of the admin API: principals of role
// admin (add, list, reissue), tally admin log, and intake's
// --oidc-admin-claim.

// verifyAs verifies token with the key in keyFile, as intake would, and
// fails t unless it names principalID with role.
func verifyAs(t *testing.T, keyFile, token, principalID, role string) {
	t.Helper()
	set, err := credential.ReadKeySet([]string{keyFile})
	if err != nil {
		t.Fatal(err)
	}
	id, err := credential.NewVerifier(set).Verify(context.Background(), strings.TrimSpace(token))
	if err != nil || id.PrincipalID != principalID || id.Role != role {
		t.Fatalf("token %.20q...: %+v, %v; want principal %s with role %s", token, id, err, principalID, role)
	}
}

// addedID is the principal id tally principal add names on stderr.
func addedID(t *testing.T, r run, name, role string) string {
	t.Helper()
	m := regexp.MustCompile(`added principal (p-[0-9a-f]+) \(` + regexp.QuoteMeta(name) + `, ` + role + `\)`).FindStringSubmatch(r.stderr)
	if r.code != 0 || m == nil {
		t.Fatalf("principal add %s: %+v; want it named with role %s", name, r, role)
	}
	return m[1]
}

// TestPrincipalAdminRole: --role admin issues a token that verifies as an
// admin's, list shows the role, reissue keeps it; a voter stays a voter;
// an unknown role is refused and adds nobody.
func TestPrincipalAdminRole(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	keyFile := credentialKeyFile(t)
	r := tally(t, db.URL, "principal", "add", "--role", "admin", "ops", "--credential-key", keyFile)
	admin := addedID(t, r, "ops", "admin")
	verifyAs(t, keyFile, r.stdout, admin, credential.RoleAdmin)
	r = tally(t, db.URL, "principal", "add", "ann", "--credential-key", keyFile)
	voter := addedID(t, r, "ann", "voter")
	verifyAs(t, keyFile, r.stdout, voter, credential.RoleVoter)

	r = tally(t, db.URL, "principal", "list", "--format", "json")
	var ps []struct{ ID, Name, Role string }
	if err := json.Unmarshal([]byte(r.stdout), &ps); err != nil || r.code != 0 {
		t.Fatalf("principal list --format json: %+v (%v)", r, err)
	}
	roles := map[string]string{}
	for _, p := range ps {
		roles[p.ID] = p.Role
	}
	if len(ps) != 2 || roles[admin] != "admin" || roles[voter] != "voter" {
		t.Fatalf("principal list --format json: %+v; want ops an admin and ann a voter", ps)
	}
	r = tally(t, db.URL, "principal", "list")
	if r.code != 0 || !regexp.MustCompile(`(?m)^ID\s+NAME\s+ROLE\s+CREATED\s+REVOKED$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^`+admin+`\s+ops\s+admin\s+\S+Z\s+-$`).MatchString(r.stdout) {
		t.Fatalf("principal list: %+v; want a ROLE column showing ops an admin", r)
	}

	for id, role := range map[string]string{admin: credential.RoleAdmin, voter: credential.RoleVoter} {
		r := tally(t, db.URL, "principal", "reissue", id, "--credential-key", keyFile)
		if r.code != 0 {
			t.Fatalf("principal reissue %s: %+v", id, r)
		}
		verifyAs(t, keyFile, r.stdout, id, role)
	}

	names := filepath.Join(t.TempDir(), "names.txt")
	if err := os.WriteFile(names, []byte("bot-1\nbot-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = tally(t, db.URL, "principal", "add", "--from", names, "--role", "admin", "--credential-key", keyFile)
	rows, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	if r.code != 0 || err != nil || len(rows) != 3 {
		t.Fatalf("principal add --from --role admin: %+v (%v)", r, err)
	}
	for _, row := range rows[1:] {
		verifyAs(t, keyFile, row[2], row[1], credential.RoleAdmin)
	}

	for _, bad := range []string{"boss", "Admin", ""} {
		r := tally(t, db.URL, "principal", "add", "--role", bad, "eve", "--credential-key", keyFile)
		if r.code != ExitError || r.stdout != "" || !strings.Contains(r.stderr, `--role "`+bad+`": give voter or admin`) {
			t.Errorf("principal add --role %q: %+v; want exit 2 saying to give voter or admin", bad, r)
		}
	}
	if r := tally(t, db.URL, "principal", "list", "--format", "json"); strings.Count(r.stdout, `"id"`) != 4 {
		t.Fatalf("principals after the refused adds: %s; want the 4 added before", r.stdout)
	}
}

// TestAdminLog: tally admin log lists what the CLI changed, by the
// database login and no principal, in a table and as JSON; --after
// skips, --limit bounds.
func TestAdminLog(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	var login string
	if err := db.Pool.QueryRow(context.Background(), `SELECT session_user`).Scan(&login); err != nil {
		t.Fatal(err)
	}
	if r := tally(t, db.URL, "poll", "create", "lunch", "--title", "Lunch?", "--choice", "pizza", "--choice", "sushi"); r.code != 0 {
		t.Fatalf("poll create: %+v", r)
	}
	if r := tally(t, db.URL, "poll", "close", "lunch", "--at", "2030-01-01T00:00:00Z"); r.code != 0 {
		t.Fatalf("poll close: %+v", r)
	}
	r := tally(t, db.URL, "principal", "add", "--role", "admin", "ops", "--credential-key", credentialKeyFile(t))
	ops := addedID(t, r, "ops", "admin")
	if r := tally(t, db.URL, "principal", "revoke", ops); r.code != 0 {
		t.Fatalf("principal revoke: %+v", r)
	}
	want := []string{"poll.create lunch", "poll.close lunch", "principal.add " + ops, "principal.revoke " + ops}

	r = tally(t, db.URL, "admin", "log", "--format", "json")
	var as []ledger.AdminAction
	if err := json.Unmarshal([]byte(r.stdout), &as); err != nil || r.code != 0 || len(as) != len(want) {
		t.Fatalf("admin log --format json: %+v (%v); want %d actions", r, err, len(want))
	}
	for i, a := range as {
		if a.Action+" "+a.Target != want[i] || a.PrincipalID != "" || a.DBUser != login || a.At.IsZero() || len(a.Detail) == 0 {
			t.Errorf("admin log --format json action %d: %+v; want %s by %s", i, a, want[i], login)
		}
	}
	if strings.Contains(r.stdout, `"principal_id"`) {
		t.Errorf("admin log --format json names a principal_id for the CLI's actions: %s", r.stdout)
	}
	r = tally(t, db.URL, "admin", "log")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != len(want)+1 || !regexp.MustCompile(`^ID\s+AT\s+PRINCIPAL\s+DB_USER\s+ACTION\s+TARGET\s+DETAIL$`).MatchString(lines[0]) {
		t.Fatalf("admin log: %+v; want a header and %d actions", r, len(want))
	}
	// No principal: the login follows the time.
	row := regexp.MustCompile(`^(\d+)\s+\S+Z\s+` + regexp.QuoteMeta(login) + `\s+(\S+)\s+(\S+)\s+\{.*\}$`)
	for i, line := range lines[1:] {
		m := row.FindStringSubmatch(line)
		if m == nil || m[1] != strconv.FormatInt(as[i].ID, 10) || m[2]+" "+m[3] != want[i] {
			t.Errorf("admin log line %d: %q; want %s by %s with no principal", i+1, line, want[i], login)
		}
	}

	var closeDetail struct {
		ClosesAt time.Time  `json:"closes_at"`
		Was      *time.Time `json:"was"`
	}
	if err := json.Unmarshal(as[1].Detail, &closeDetail); err != nil || !closeDetail.ClosesAt.Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) ||
		closeDetail.Was != nil {
		t.Errorf("poll.close detail %s (%v); want closes_at 2030-01-01T00:00:00Z, was null", as[1].Detail, err)
	}

	pages := []struct {
		args []string
		want []string
	}{
		{[]string{"--after", strconv.FormatInt(as[0].ID, 10)}, want[1:]},
		{[]string{"--after", strconv.FormatInt(as[1].ID, 10), "--limit", "1"}, want[2:3]},
		{[]string{"--limit", "1"}, want[:1]},
		{[]string{"--after", strconv.FormatInt(as[3].ID, 10)}, nil},
	}
	for _, p := range pages {
		r := tally(t, db.URL, append([]string{"admin", "log", "--format", "json"}, p.args...)...)
		var got []ledger.AdminAction
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 || got == nil {
			t.Fatalf("admin log %v: %+v (%v); want a JSON array", p.args, r, err)
		}
		var briefs []string
		for _, a := range got {
			briefs = append(briefs, a.Action+" "+a.Target)
		}
		if strings.Join(briefs, ",") != strings.Join(p.want, ",") {
			t.Errorf("admin log %v: %v, want %v", p.args, briefs, p.want)
		}
	}
	if r := tally(t, db.URL, "admin", "log", "--limit", "0"); r.code != ExitError || !strings.Contains(r.stderr, "limit must be positive") {
		t.Errorf("admin log --limit 0: %+v; want exit 2 saying the limit must be positive", r)
	}
}

// TestAdminClaimsPerIssuer: each issuer gets the claim in its position,
// none for -, and none at all when no claim is given.
func TestAdminClaimsPerIssuer(t *testing.T) {
	t.Parallel()
	urls := []string{"https://a.example.org", "https://b.example.org"}
	got, err := adminClaims(urls, []string{"-", "roles=tally-admin"})
	if err != nil || got[0] != (adminClaim{}) || got[1] != (adminClaim{"roles", "tally-admin"}) {
		t.Fatalf("adminClaims(-, roles=tally-admin): %+v, %v", got, err)
	}
	if got, err := adminClaims(urls, nil); err != nil || len(got) != 2 || got[0] != (adminClaim{}) || got[1] != (adminClaim{}) {
		t.Fatalf("adminClaims with none given: %+v, %v", got, err)
	}
}

// TestIntakeOIDCAdminClaimFlag: a malformed --oidc-admin-claim, one
// without an issuer, or one for several issuers, is refused before intake
// connects anywhere.
func TestIntakeOIDCAdminClaimFlag(t *testing.T) {
	t.Parallel()
	const issuer = "https://id.example.org"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--oidc-issuer", issuer, "--oidc-audience", "tally", "--oidc-admin-claim", "groups"}, `--oidc-admin-claim "groups": give CLAIM=VALUE`},
		{[]string{"--oidc-issuer", issuer, "--oidc-audience", "tally", "--oidc-admin-claim", "groups="}, `--oidc-admin-claim "groups=": give CLAIM=VALUE`},
		{[]string{"--oidc-issuer", issuer, "--oidc-audience", "tally", "--oidc-admin-claim", "=tally-admins"}, `--oidc-admin-claim "=tally-admins": give CLAIM=VALUE`},
		{[]string{"--oidc-admin-claim", "groups=tally-admins"}, "--oidc-admin-claim needs an --oidc-issuer"},
		{[]string{"--oidc-issuer", issuer, "--oidc-audience", "tally", "--oidc-issuer", "https://other.example.org", "--oidc-audience", "tally",
			"--oidc-admin-claim", "groups=tally-admins"}, "1 --oidc-admin-claim for 2 --oidc-issuer: give one for each issuer"},
	} {
		// An unreachable database: the flags are checked before connecting.
		r := tally(t, "postgres://postgres@127.0.0.1:1/none?connect_timeout=1", append(append([]string{"intake"}, c.args...), "--startup-wait", "0s")...)
		if r.code != ExitError || !strings.Contains(r.stderr, c.want) {
			t.Errorf("tally intake %v: exit %d, stderr %q; want exit 2 saying %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
