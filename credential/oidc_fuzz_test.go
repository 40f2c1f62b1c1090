package credential

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

const fuzzIssuer = "https://issuer.example"

// fuzzKeys are the keys FuzzVerify's verifier holds: one of tally's own,
// and an issuer's RSA and ECDSA keys, as if fetched.
type fuzzKeys struct {
	own *Key
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
}

var fuzzSetup = sync.OnceValues(func() (*Verifier, fuzzKeys) {
	own, err := GenerateKey()
	if err != nil {
		panic(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	ownSet, err := NewKeySet(own)
	if err != nil {
		panic(err)
	}
	o, err := NewOIDCIssuer(OIDCConfig{Issuer: fuzzIssuer, Audience: "tally"})
	if err != nil {
		panic(err)
	}
	o.keys.store(newKeySet([]jose.JSONWebKey{
		{Key: &rk.PublicKey, KeyID: "r1", Algorithm: "RS256", Use: "sig"},
		{Key: &ek.PublicKey, KeyID: "e1", Algorithm: "ES256", Use: "sig"},
	}))
	return NewVerifier(ownSet, o), fuzzKeys{own: &own, rsa: rk, ec: ek}
})

// FuzzVerify: whatever the token, Verify does not panic, refuses with
// ErrInvalid, or accepts only a token whose signature one of the keys it
// holds makes, checked here without go-jose or golang-jwt.
func FuzzVerify(f *testing.F) {
	v, keys := fuzzSetup()
	far := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	ownTok, _ := keys.own.Issue("p-alice", time.Unix(1e9, 0), time.Time{})
	ownExp, _ := keys.own.Issue("p-bob", time.Unix(1e9, 0), far)
	claims := map[string]any{"iss": fuzzIssuer, "sub": "alice", "aud": []string{"tally"}, "exp": far.Unix(), "iat": 1e9}
	rs := fuzzSign(f, jose.RS256, keys.rsa, "r1", claims)
	es := fuzzSign(f, jose.ES256, keys.ec, "e1", claims)
	noKid := fuzzSign(f, jose.RS256, keys.rsa, "", claims)
	p := strings.Split(rs, ".")
	for _, seed := range []string{
		ownTok, ownExp, rs, es, noKid,
		"", ".", "..", "a.b.c", "a.b.c.d", strings.Repeat(".", 5),
		b64(`{"alg":"none"}`) + "." + p[1] + ".",
		b64(`{"alg":"HS256","kid":"r1"}`) + "." + p[1] + "." + p[2],
		p[0] + "." + b64(`{"iss":"tally","sub":"p-alice"}`) + "." + p[2],
		p[0] + "." + b64(`{"iss":7}`) + "." + p[2],
		p[0] + "=." + p[1] + "." + p[2],
		rs[:len(rs)-3], es + "A",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		id, err := v.Verify(context.Background(), token)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("refused with %v, not ErrInvalid", err)
			}
			return
		}
		if !signedByHeldKey(token, keys) {
			t.Fatalf("accepted %q as %+v, but no key held signed it", token, id)
		}
		if id.Issuer != Issuer && id.Issuer != fuzzIssuer {
			t.Fatalf("accepted %q with issuer %q", token, id.Issuer)
		}
	})
}

// signedByHeldKey checks a JWS in compact form against keys, by its
// header's alg, with the standard library alone.
func signedByHeldKey(token string, keys fuzzKeys) bool {
	p := strings.Split(token, ".")
	if len(p) != 3 {
		return false
	}
	rawHeader, err := base64.RawURLEncoding.DecodeString(p[0])
	if err != nil {
		return false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(rawHeader, &h) != nil {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(p[2])
	if err != nil {
		return false
	}
	input := []byte(p[0] + "." + p[1])
	sum := sha256.Sum256(input)
	switch h.Alg {
	case "HS256":
		mac := hmac.New(sha256.New, keys.own.secret)
		mac.Write(input)
		return hmac.Equal(mac.Sum(nil), sig)
	case "RS256":
		return rsa.VerifyPKCS1v15(&keys.rsa.PublicKey, crypto.SHA256, sum[:], sig) == nil
	case "ES256":
		return len(sig) == 64 && ecdsa.Verify(&keys.ec.PublicKey, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
	}
	return false
}

func fuzzSign(tb testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	tb.Helper()
	opts := &jose.SignerOptions{}
	if kid != "" {
		opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		tb.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := s.Sign(payload)
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// TestFuzzSeedsVerify: the fuzz target's oracle and verifier agree on the
// seeds that must verify, so the target can tell an acceptance apart.
func TestFuzzSeedsVerify(t *testing.T) {
	t.Parallel()
	v, keys := fuzzSetup()
	claims := map[string]any{"iss": fuzzIssuer, "sub": "alice", "aud": "tally", "exp": time.Now().Add(time.Hour).Unix()}
	ownTok, _ := keys.own.Issue("p-alice", time.Now(), time.Time{})
	for name, tok := range map[string]string{
		"own":    ownTok,
		"RS256":  fuzzSign(t, jose.RS256, keys.rsa, "r1", claims),
		"ES256":  fuzzSign(t, jose.ES256, keys.ec, "e1", claims),
		"no kid": fuzzSign(t, jose.RS256, keys.rsa, "", claims),
	} {
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !signedByHeldKey(tok, keys) {
			t.Errorf("%s: the oracle does not see the signature", name)
		}
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	forged := fuzzSign(t, jose.ES256, other, "e1", claims)
	if _, err := v.Verify(context.Background(), forged); !errors.Is(err, ErrInvalid) {
		t.Errorf("another ECDSA key under kid e1: %v", err)
	}
	if signedByHeldKey(forged, keys) {
		t.Error("the oracle takes another key's signature")
	}
}
