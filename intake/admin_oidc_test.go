package intake_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"tally/credential"
	"tally/internal/oidctest"
	"tally/internal/testenv"
)

// This file tests OpenID Connect admins at intake: an issuer configured
// with an admin claim (--oidc-admin-claim groups=tally-admins) makes the
// bearer of a token carrying it an admin of the admin routes, recorded in
// admin_actions under its subject's principal id; any other token of the
// issuer is a voter's, refused 403.

// TestOIDCAdminClaim: tokens signed by the provider's key, alike but for
// their subject and groups claim. The one whose groups hold tally-admins
// lists and creates polls; one without the value, or without the claim,
// gets 403 forbidden and creates nothing; once revoked (over HTTP, whose
// answer names no made-up role), the admin gets 401.
func TestOIDCAdminClaim(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	iss := oidcIssuer(t, p.URL(), credential.OIDCConfig{AdminClaim: "groups", AdminValue: "tally-admins"})
	// tally's own tokens too: an admin of tally's own revokes the
	// issuer's admin.
	b := setup(t, func(c *config) {
		own, err := credential.NewKeySet(*c.TokenKey)
		if err != nil {
			t.Fatal(err)
		}
		c.Credentials = credential.NewVerifier(own, iss)
	})
	waitKeys(t, b)
	good := p.Token()
	base, _ := claimsOf(t, good)
	key := p.SigningKey()
	token := func(sub string, groups any) string {
		c := map[string]any{}
		for k, v := range base {
			c[k] = v
		}
		c["sub"] = sub
		if groups != nil {
			c["groups"] = groups
		}
		return oidctest.Sign(t, key.Private, key.ID, c)
	}
	admin := token("alice", []string{"staff", "tally-admins"})
	voters := map[string]string{
		"groups without tally-admins":  token("bob", []string{"staff"}),
		"no groups claim":              token("carol", nil),
		"groups naming it in a string": token("dave", "staff tally-admins"),
		"the provider's own token":     good,
	}

	r := b.adminDo(t, http.MethodGet, "/v1/polls", admin, "")
	polls, _ := r.body["polls"].([]any)
	if r.code != http.StatusOK || len(polls) != 1 {
		t.Fatalf("GET /v1/polls with groups holding tally-admins: %d %s, want 200 listing p1", r.code, r.raw)
	}
	for what, tok := range voters {
		if r := b.adminDo(t, http.MethodGet, "/v1/polls", tok, ""); r.code != http.StatusForbidden || r.str("type") != "urn:tally:problem:forbidden" {
			t.Errorf("GET /v1/polls with %s: %d %s, want 403 forbidden", what, r.code, r.raw)
		}
		r := b.adminDo(t, http.MethodPost, "/v1/polls", tok, `{"poll_id":"by-voter","title":"T","choices":["a"]}`)
		if r.code != http.StatusForbidden {
			t.Errorf("POST /v1/polls with %s: %d %s, want 403", what, r.code, r.raw)
		}
	}
	if _, err := b.store.Poll(context.Background(), "by-voter"); err == nil {
		t.Fatal("a voter's POST /v1/polls created the poll")
	}

	if r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, `{"poll_id":"by-admin","title":"T","choices":["a"]}`); r.code != http.StatusCreated {
		t.Fatalf("POST /v1/polls as the OpenID Connect admin: %d %s, want 201", r.code, r.raw)
	}
	id := credential.PrincipalIDFor(p.URL(), "alice")
	acts, err := b.store.AdminActions(context.Background(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, a := range acts {
		if a.Action == "poll.create" && a.Target == "by-admin" {
			found = a.PrincipalID == id
			if !found {
				t.Fatalf("poll.create by-admin recorded as by %q, want the subject's principal id %s", a.PrincipalID, id)
			}
		}
	}
	if !found {
		t.Fatalf("admin_actions %+v: no poll.create of by-admin", acts)
	}

	// Revoked over HTTP by an admin of tally's own: the answer does not
	// make up a role (the row stores none; the issuer's tokens say it).
	_, ops := b.admin(t, "ops")
	r = b.adminDo(t, http.MethodPost, "/v1/principals/"+id+"/revoke", ops, "")
	if role, held := r.body["role"]; r.code != http.StatusOK || !held || role != nil {
		t.Fatalf("revoking the OpenID Connect admin: %d %s, want 200 with role null", r.code, r.raw)
	}
	r = b.adminDo(t, http.MethodGet, "/v1/principals?limit=1000", ops, "")
	for _, e := range r.body["principals"].([]any) {
		if e := e.(map[string]any); e["principal_id"] == id && e["role"] != nil {
			t.Fatalf("GET /v1/principals lists the OpenID Connect admin with role %v, want null", e["role"])
		}
	}
	testenv.Eventually(t, 10*time.Second, "the revoked OpenID Connect admin refused", func() bool {
		return b.adminDo(t, http.MethodGet, "/v1/polls", admin, "").code == http.StatusUnauthorized
	})
	wantInvalidToken(t, "the revoked admin's token", b.adminDo(t, http.MethodGet, "/v1/polls", admin, ""))
}
