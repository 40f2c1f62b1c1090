package credential

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// TestCacheKeyedByKey: a token that verified is taken again from the
// cache only while the very key that verified it is held: once the issuer
// replaces that key under the same kid (a key compromised and replaced),
// the token is checked again, and refused.
func TestCacheKeyedByKey(t *testing.T) {
	t.Parallel()
	stolen, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	o, err := NewOIDCIssuer(OIDCConfig{Issuer: fuzzIssuer, Audience: "tally"})
	if err != nil {
		t.Fatal(err)
	}
	o.keys.store(newKeySet([]jose.JSONWebKey{{Key: &stolen.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}))
	v := NewVerifier(nil, o)
	claims := map[string]any{"iss": fuzzIssuer, "sub": "alice", "aud": "tally", "exp": time.Now().Add(time.Hour).Unix()}
	tok := fuzzSign(t, jose.RS256, stolen, "k1", claims)
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatalf("signed by the issuer's key k1: %v", err)
	}
	if _, _, ok := o.cache.get(sha256.Sum256([]byte(tok)), time.Now()); !ok {
		t.Fatal("the token that verified is not cached")
	}

	o.keys.store(newKeySet([]jose.JSONWebKey{{Key: &fresh.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}))
	if _, err := v.Verify(context.Background(), tok); !errors.Is(err, ErrInvalid) {
		t.Fatalf("signed by the key k1 named before the issuer replaced it: %v, want refused", err)
	}
	if _, err := v.Verify(context.Background(), fuzzSign(t, jose.RS256, fresh, "k1", claims)); err != nil {
		t.Fatalf("signed by the issuer's new key k1: %v", err)
	}
}

// TestCacheLifetimeBounded: a token that claims to expire in the year
// 5138 is remembered for CacheTTL, not until then; one that expires
// sooner, until its expiry (and the leeway).
func TestCacheLifetimeBounded(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Minute
	o, err := NewOIDCIssuer(OIDCConfig{Issuer: fuzzIssuer, Audience: "tally", CacheTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	o.keys.store(newKeySet([]jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}))
	v := NewVerifier(nil, o)
	for _, c := range []struct {
		exp  time.Time
		want time.Duration // the most it may be remembered from now
	}{
		{time.Date(5138, 1, 1, 0, 0, 0, 0, time.UTC), ttl},
		{time.Now().Add(10 * time.Second), 10*time.Second + Leeway},
	} {
		tok := fuzzSign(t, jose.RS256, key, "k1", map[string]any{"iss": fuzzIssuer, "sub": "alice", "aud": "tally", "exp": c.exp.Unix()})
		before := time.Now()
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Fatalf("exp %v: %v", c.exp, err)
		}
		sum := sha256.Sum256([]byte(tok))
		if _, _, ok := o.cache.get(sum, before.Add(c.want-time.Second)); !ok {
			t.Errorf("exp %v: not remembered %v after it verified", c.exp, c.want-time.Second)
		}
		if _, _, ok := o.cache.get(sum, time.Now().Add(c.want+time.Second)); ok {
			t.Errorf("exp %v: still remembered %v after it verified", c.exp, c.want+time.Second)
		}
	}
}
