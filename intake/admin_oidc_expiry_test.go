package intake_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"tally/credential"
	"tally/internal/oidctest"
)

// TestOIDCAdminMintsNoLongerLived: an admin by an OpenID Connect issuer's
// admin claim, whose token expires in an hour, adds an admin over HTTP
// (Config.AddAdminsOverHTTP): the new admin's token expires no later than
// the OpenID Connect token, whether it asked for no expiry or a later
// one; a shorter one is kept.
func TestOIDCAdminMintsNoLongerLived(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	iss := oidcIssuer(t, p.URL(), credential.OIDCConfig{AdminClaim: "groups", AdminValue: "tally-admins"})
	b := setup(t, trusting(iss), func(c *config) { c.AddAdminsOverHTTP = true })
	waitKeys(t, b)
	base, _ := claimsOf(t, p.Token())
	claims := map[string]any{}
	for k, v := range base {
		claims[k] = v
	}
	creatorExpiry := time.Now().Add(time.Hour).Truncate(time.Second)
	claims["sub"], claims["groups"], claims["exp"] = "alice", []string{"tally-admins"}, creatorExpiry.Unix()
	key := p.SigningKey()
	creator := oidctest.Sign(t, key.Private, key.ID, claims)
	if id, err := b.cfg.Credentials.Verify(context.Background(), creator); err != nil || id.Role != credential.RoleAdmin || !id.ExpiresAt.Equal(creatorExpiry) {
		t.Fatalf("the OpenID Connect admin's token: %+v, %v; want an admin's expiring at %v", id, err, creatorExpiry)
	}
	for _, c := range []struct {
		expires string
		want    time.Time
	}{
		{"", creatorExpiry},
		{"720h", creatorExpiry},
		{"10m", time.Now().Add(10 * time.Minute)},
	} {
		r := b.adminDo(t, http.MethodPost, "/v1/principals", creator, `{"names":["ops"],"role":"admin","expires":"`+c.expires+`"}`)
		if r.code != http.StatusCreated {
			t.Fatalf("an OpenID Connect admin asking for an admin expiring %q: %d %s", c.expires, r.code, r.raw)
		}
		got, err := time.Parse(time.RFC3339, r.str("expires_at"))
		if err != nil || got.Sub(c.want).Abs() > 2*time.Second {
			t.Fatalf("an admin asked to expire %q by an OpenID Connect admin whose token expires at %v expires at %q, want %v",
				c.expires, creatorExpiry, r.str("expires_at"), c.want)
		}
		ps, _ := r.body["principals"].([]any)
		minted, _ := ps[0].(map[string]any)["token"].(string)
		id, err := b.cfg.Credentials.Verify(context.Background(), minted)
		if err != nil || id.Role != credential.RoleAdmin || id.ExpiresAt.IsZero() || id.ExpiresAt.After(creatorExpiry) {
			t.Fatalf("the minted admin's token: %+v (%v), want an admin's expiring no later than %v", id, err, creatorExpiry)
		}
	}
}
