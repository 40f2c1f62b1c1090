package credential_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"tally/credential"
	"tally/internal/oidctest"
	"tally/internal/testenv"
)

// This file tests the role a token grants: the "role" claim of tally's
// own tokens, an OpenID Connect issuer's admin claim, and ParseExpiry,
// which reads the expiry of the tokens the CLI issues.

// TestIssueRole: an admin's token verifies as RoleAdmin and says so in
// its claims; a voter's, by Issue or IssueRole, verifies as RoleVoter and
// names no role.
func TestIssueRole(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	v := verifier(t, k)
	created := time.Now()
	issue := map[string]func() (string, error){
		credential.RoleAdmin: func() (string, error) { return k.IssueRole("p-admin", credential.RoleAdmin, created, time.Time{}) },
		"voter by Issue":     func() (string, error) { return k.Issue("p-admin", created, time.Time{}) },
		"voter by IssueRole": func() (string, error) { return k.IssueRole("p-admin", credential.RoleVoter, created, time.Time{}) },
	}
	for name, f := range issue {
		tok, err := f()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		id, err := v.Verify(context.Background(), tok)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		role, named := parts(t, tok).Claims["role"]
		if name == credential.RoleAdmin {
			if id.Role != credential.RoleAdmin || role != credential.RoleAdmin {
				t.Errorf("an admin's token: identity %+v, claim role %v; want admin in both", id, role)
			}
		} else if id.Role != credential.RoleVoter || named {
			t.Errorf("%s: identity %+v, claim role %v; want RoleVoter and no role claim", name, id, role)
		}
	}
	for _, role := range []string{"boss", "Admin", "root"} {
		if tok, err := k.IssueRole("p-admin", role, created, time.Time{}); err == nil {
			t.Errorf("IssueRole(%q) = %.20s..., want an error", role, tok)
		}
	}
}

// TestRoleClaimRefused: a token of tally's own, signed by the key, whose
// role is not one tally grants is refused, not taken as a voter's or an
// admin's.
func TestRoleClaimRefused(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	v := verifier(t, k)
	claims := func(role any) map[string]any {
		return map[string]any{"iss": credential.Issuer, "sub": "p-alice", "created": time.Now().Unix(), "role": role}
	}
	for _, role := range []any{"boss", "ADMIN", "Voter", "admin ", " admin", []string{"admin"}, 1, true, map[string]any{"admin": true}} {
		if id, err := v.Verify(context.Background(), signWith(t, k, claims(role))); !errors.Is(err, credential.ErrInvalid) {
			t.Errorf("role %#v: %+v, %v; want ErrInvalid", role, id, err)
		}
	}
	// The same claims with the roles tally grants verify: the refusals are
	// for the role.
	if id, err := v.Verify(context.Background(), signWith(t, k, claims(credential.RoleAdmin))); err != nil || id.Role != credential.RoleAdmin {
		t.Errorf("role admin, signed alike: %+v, %v", id, err)
	}
	if id, err := v.Verify(context.Background(), signWith(t, k, claims(credential.RoleVoter))); err != nil || id.Role != credential.RoleVoter {
		t.Errorf("role voter named, signed alike: %+v, %v", id, err)
	}
	noRole := claims(nil)
	delete(noRole, "role")
	if id, err := v.Verify(context.Background(), signWith(t, k, noRole)); err != nil || id.Role != credential.RoleVoter {
		t.Errorf("no role, signed alike: %+v, %v", id, err)
	}
}

// TestOIDCAdminClaim: with AdminClaim groups and AdminValue tally-admins,
// a token whose groups is tally-admins or an array holding it is an
// admin's; any other token of the issuer a voter's. Without AdminClaim
// none is an admin's.
func TestOIDCAdminClaim(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	v := credential.NewVerifier(nil, runIssuer(t, credential.OIDCConfig{Issuer: p.URL(), AdminClaim: "groups", AdminValue: "tally-admins"}))
	plain := credential.NewVerifier(nil, runIssuer(t, credential.OIDCConfig{Issuer: p.URL()}))
	good := p.Token()
	testenv.Eventually(t, 5*time.Second, "the provider's token verifies", verifies(v, good))
	testenv.Eventually(t, 5*time.Second, "the provider's token verifies without an admin claim", verifies(plain, good))

	key := p.SigningKey()
	token := func(claim string, value any) string {
		c := map[string]any{}
		for name, v := range parts(t, good).Claims {
			c[name] = v
		}
		if claim != "" {
			c[claim] = value
		}
		return oidctest.Sign(t, key.Private, key.ID, c)
	}
	cases := []struct {
		name  string
		token string
		role  string
	}{
		{"groups holding the value", token("groups", []string{"x", "tally-admins"}), credential.RoleAdmin},
		{"groups holding only the value", token("groups", []string{"tally-admins"}), credential.RoleAdmin},
		{"groups the value", token("groups", "tally-admins"), credential.RoleAdmin},
		{"groups without it", token("groups", []string{"x"}), credential.RoleVoter},
		{"groups empty", token("groups", []string{}), credential.RoleVoter},
		{"no groups", token("", nil), credential.RoleVoter},
		{"groups null", token("groups", nil), credential.RoleVoter},
		{"groups a number", token("groups", 7), credential.RoleVoter},
		{"groups true", token("groups", true), credential.RoleVoter},
		{"groups an object", token("groups", map[string]any{"tally-admins": true}), credential.RoleVoter},
		{"groups nested", token("groups", []any{[]string{"tally-admins"}}), credential.RoleVoter},
		{"a longer value", token("groups", []string{"tally-admins-x"}), credential.RoleVoter},
		{"a prefix", token("groups", "tally-admin"), credential.RoleVoter},
		{"the value and more", token("groups", "tally-admins,x"), credential.RoleVoter},
		{"another case", token("groups", []string{"Tally-Admins"}), credential.RoleVoter},
		{"the value in another claim", token("roles", []string{"tally-admins"}), credential.RoleVoter},
		{"tally's own role claim", token("role", credential.RoleAdmin), credential.RoleVoter},
	}
	for _, c := range cases {
		id, err := v.Verify(context.Background(), c.token)
		if err != nil || id.Role != c.role {
			t.Errorf("%s: %+v, %v; want role %s", c.name, id, err, c.role)
		}
		if id, err := plain.Verify(context.Background(), c.token); err != nil || id.Role != credential.RoleVoter {
			t.Errorf("%s, to an issuer without an admin claim: %+v, %v; want a voter", c.name, id, err)
		}
	}
}

// TestOIDCAdminClaimNeedsValue: an admin claim without the value to
// match is refused; with it, taken.
func TestOIDCAdminClaimNeedsValue(t *testing.T) {
	t.Parallel()
	cfg := credential.OIDCConfig{Issuer: "https://id.example.org", Audience: "tally", AdminClaim: "groups"}
	if _, err := credential.NewOIDCIssuer(cfg); err == nil {
		t.Error("NewOIDCIssuer took an AdminClaim without an AdminValue")
	}
	cfg.AdminValue = "tally-admins"
	if _, err := credential.NewOIDCIssuer(cfg); err != nil {
		t.Errorf("NewOIDCIssuer with AdminClaim and AdminValue: %v", err)
	}
}

func TestParseExpiry(t *testing.T) {
	t.Parallel()
	now := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Time // zero with ok: no expiry
		ok   bool
	}{
		{"", time.Time{}, true},
		{"720h", now.Add(720 * time.Hour), true},
		{"1s", now.Add(time.Second), true},
		{"1h30m", now.Add(90 * time.Minute), true},
		{"0s", time.Time{}, false},
		{"0", time.Time{}, false},
		{"-1h", time.Time{}, false},
		{"2027-01-31T00:00:00Z", time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC), true},
		{"2027-01-01T13:00:00+02:00", time.Date(2027, 1, 1, 11, 0, 0, 0, time.UTC), false}, // an hour ago
		{"2027-01-01T15:00:00+02:00", time.Date(2027, 1, 1, 13, 0, 0, 0, time.UTC), true},
		{"2027-01-01T12:00:01Z", now.Add(time.Second), true},
		{"2027-01-01T12:00:00Z", time.Time{}, false}, // now is not in the future
		{"2001-01-01T00:00:00Z", time.Time{}, false},
		{"yesterday", time.Time{}, false},
		{"720", time.Time{}, false},
		{"2027-01-31", time.Time{}, false},
		{"2027-01-31 00:00:00Z", time.Time{}, false},
	}
	for _, c := range cases {
		got, err := credential.ParseExpiry(c.in, now)
		if (err == nil) != c.ok || (c.ok && !got.Equal(c.want)) || (c.ok && c.want.IsZero() != got.IsZero()) {
			t.Errorf("ParseExpiry(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
