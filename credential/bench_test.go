package credential_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"tally/credential"
	"tally/internal/oidctest"
	"tally/internal/testenv"
)

// BenchmarkVerify is the CPU a vote's token costs intake: one token of
// tally's own, parsed and checked.
func BenchmarkVerify(b *testing.B) {
	k := newKey(b)
	tok, err := k.Issue("p-0123456789abcdef01234567", time.Now(), time.Now().Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	v := verifier(b, k)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyEd25519 is the baseline of the choice of HMAC: the same
// claims signed with Ed25519, parsed and checked by the same library.
func BenchmarkVerifyEd25519(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: priv}, nil)
	if err != nil {
		b.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(jwt.Claims{Issuer: "tally", Subject: "p-0123456789abcdef01234567",
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
	if err != nil {
		b.Fatal(err)
	}
	algs := []jose.SignatureAlgorithm{jose.EdDSA}
	b.ReportAllocs()
	for b.Loop() {
		t, err := jwt.ParseSigned(tok, algs)
		if err != nil {
			b.Fatal(err)
		}
		var c jwt.Claims
		if err := t.Claims(pub, &c); err != nil {
			b.Fatal(err)
		}
		if err := c.Validate(jwt.Expected{Issuer: "tally", Time: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyOIDC is the CPU an OpenID Connect voter's token costs
// intake: an RS256 access token of a real provider (zitadel/oidc's op on a
// loopback port), its keys fetched. "uncached" checks the signature and
// claims each time (CacheSize -1); "cached" is the same token again, found
// by its hash.
func BenchmarkVerifyOIDC(b *testing.B) {
	p := oidctest.Start(b)
	for _, bc := range []struct {
		name      string
		cacheSize int
	}{{"uncached", -1}, {"cached", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			v := credential.NewVerifier(nil, runIssuer(b, credential.OIDCConfig{Issuer: p.URL(), CacheSize: bc.cacheSize}))
			tok := p.Token()
			testenv.Eventually(b, 5*time.Second, "the provider's token verifies", verifies(v, tok))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
