package oidctest_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"tally/internal/oidctest"
)

// claims are a token's claims and header "kid", read without verifying.
func claims(t *testing.T, token string) (map[string]any, string) {
	t.Helper()
	parts := strings.Split(token, ".")
	var header struct{ Kid string }
	var c map[string]any
	for i, v := range []any{&header, &c} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatal(err)
		}
	}
	return c, header.Kid
}

// TestProvider: the provider's tokens name it, the client and the key it
// signs with; ScopeExpired gives an expired token; a rotated key signs the
// next token; a stopped provider answers nothing until it starts again.
func TestProvider(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	c, kid := claims(t, p.Token())
	if c["iss"] != p.URL() || c["sub"] != oidctest.ClientID || kid != p.SigningKey().ID {
		t.Fatalf("token claims %v, kid %q; want iss %s, sub %s, kid %s", c, kid, p.URL(), oidctest.ClientID, p.SigningKey().ID)
	}
	if aud, _ := c["aud"].([]any); len(aud) == 0 || aud[0] != oidctest.ClientID {
		t.Fatalf("token aud %v, want [%s ...]", c["aud"], oidctest.ClientID)
	}
	if c, _ := claims(t, p.Token(oidctest.ScopeExpired)); int64(c["exp"].(float64)) > time.Now().Add(-time.Minute).Unix() {
		t.Fatalf("a token of ScopeExpired expires at %v, not in the past", c["exp"])
	}

	k := p.Rotate(oidctest.Keys()[1], false)
	if _, kid := claims(t, p.Token()); kid != k.ID {
		t.Fatalf("after Rotate the token's kid is %q, want %q", kid, k.ID)
	}

	p.Stop()
	if resp, err := http.Get(p.URL() + "/.well-known/openid-configuration"); err == nil {
		resp.Body.Close()
		t.Fatal("a stopped provider answered")
	}
	p.Start()
	resp, err := http.Get(p.URL() + "/keys")
	if err != nil {
		t.Fatalf("the started provider's keys: %v", err)
	}
	resp.Body.Close()
	if p.KeyFetches() != 1 {
		t.Fatalf("KeyFetches %d after one request for the keys, want 1", p.KeyFetches())
	}
	http.DefaultClient.CloseIdleConnections()
}
