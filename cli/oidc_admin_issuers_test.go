package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"tally/internal/oidctest"
	"tally/internal/testenv"
)

// TestIntakeAdminClaimOfOneIssuer: tally intake trusting two OpenID
// Connect issuers, with --oidc-admin-claim groups=tally-admins for the
// first and - for the second. A token of the first whose groups hold
// tally-admins lists the polls (200); a token of the second carrying the
// same claim is a voter's, refused 403 forbidden, although it verifies
// (its subject may vote).
func TestIntakeAdminClaimOfOneIssuer(t *testing.T) {
	t.Parallel()
	admins, others := oidctest.Start(t), oidctest.Start(t)
	tokenOf := func(p *oidctest.Provider) string {
		claims := claimsOfToken(t, p.Token())
		claims["groups"] = []string{"staff", "tally-admins"}
		key := p.SigningKey()
		return oidctest.Sign(t, key.Private, key.ID, claims)
	}
	adminToken, otherToken := tokenOf(admins), tokenOf(others)
	keyFile := credentialKeyFile(t)
	db := testenv.Postgres(t)
	_, prefix := testenv.Redis(t)
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	stop := startDaemon(t, []string{"intake", "--listen", addr, "--database-url", testenv.DaemonLogin(t, db),
		"--redis-url", testenv.RedisURL(), "--stream-prefix", prefix, "--credential-key", keyFile,
		"--oidc-issuer", admins.URL(), "--oidc-audience", oidctest.ClientID, "--oidc-admin-claim", "groups=tally-admins",
		"--oidc-issuer", others.URL(), "--oidc-audience", oidctest.ClientID, "--oidc-admin-claim", "-"})
	defer stop()
	client := apiClient(t)
	get := func(path, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error() // intake is starting
		}
		defer resp.Body.Close()
		var body struct {
			Type string `json:"type"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Type
	}
	testenv.Eventually(t, 20*time.Second, "GET /v1/polls with the first issuer's admin claim to answer 200", func() error {
		if code, typ := get("/v1/polls", adminToken); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, typ)
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, "the second issuer's token to verify", func() error {
		if code, typ := get("/v1/polls/none/results", otherToken); code != http.StatusNotFound {
			return fmt.Errorf("GET the results of no poll: %d %s, want 404 (the token taken)", code, typ)
		}
		return nil
	})
	if code, typ := get("/v1/polls", otherToken); code != http.StatusForbidden || typ != "urn:tally:problem:forbidden" {
		t.Fatalf("GET /v1/polls with the second issuer's token carrying groups=tally-admins: %d %s, want 403 forbidden", code, typ)
	}
}

// claimsOfToken reads a JWT's claims without verifying them.
func claimsOfToken(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %.20s...", token)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatal(err)
	}
	return claims
}
