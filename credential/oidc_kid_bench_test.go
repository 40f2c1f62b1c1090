package credential

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strconv"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// BenchmarkForgedNoKid: a forged token that names no key, against an
// issuer of 6,002 ES256 keys (the JWKS of issue 35), is refused without
// trying each key.
func BenchmarkForgedNoKid(b *testing.B) {
	keys := make([]jose.JSONWebKey, 6002)
	for i := range keys {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		keys[i] = jose.JSONWebKey{Key: &k.PublicKey, KeyID: "k" + strconv.Itoa(i), Algorithm: "ES256", Use: "sig"}
	}
	o, _ := NewOIDCIssuer(OIDCConfig{Issuer: fuzzIssuer, Audience: "tally", CacheSize: -1})
	o.keys.store(newKeySet(keys))
	v := NewVerifier(nil, o)
	forger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tok := fuzzSign(b, jose.ES256, forger, "", map[string]any{"iss": fuzzIssuer, "sub": "x", "aud": "tally", "exp": time.Now().Add(time.Hour).Unix()})
	b.ResetTimer()
	for b.Loop() {
		if _, err := v.Verify(context.Background(), tok); err == nil {
			b.Fatal("forged token accepted")
		}
	}
}
