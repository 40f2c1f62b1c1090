package intake_test

import (
	"context"
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
	mintsCapped(t, b, creator, creatorExpiry, "an OpenID Connect admin")
}
