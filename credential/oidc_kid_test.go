package credential

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// TestNoKidAmongManyKeys: a token that names no key is checked against
// the one key of its algorithm the issuer holds, and refused, with no
// signature tried, where the issuer holds more than one (each forged
// token would otherwise cost one check per key); with its kid it verifies.
func TestNoKidAmongManyKeys(t *testing.T) {
	t.Parallel()
	r1, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{"iss": fuzzIssuer, "sub": "alice", "aud": "tally", "exp": time.Now().Add(time.Hour).Unix()}
	issuer := func(keys ...jose.JSONWebKey) *Verifier {
		o, err := NewOIDCIssuer(OIDCConfig{Issuer: fuzzIssuer, Audience: "tally", CacheSize: -1})
		if err != nil {
			t.Fatal(err)
		}
		o.keys.store(newKeySet(keys))
		return NewVerifier(nil, o)
	}
	verify := func(v *Verifier, tok string) error {
		_, err := v.Verify(context.Background(), tok)
		return err
	}

	for name, alg := range map[string]string{"named": "RS256", "by type": ""} {
		v := issuer(
			jose.JSONWebKey{Key: &r1.PublicKey, KeyID: "r1", Algorithm: alg, Use: "sig"},
			jose.JSONWebKey{Key: &r2.PublicKey, KeyID: "r2", Algorithm: alg, Use: "sig"},
			jose.JSONWebKey{Key: &ec.PublicKey, KeyID: "e1", Algorithm: "ES256", Use: "sig"},
		)
		err := verify(v, fuzzSign(t, jose.RS256, r2, "", claims))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `names no key id ("kid" in its header), and the issuer holds 2 keys for RS256`) {
			t.Errorf("%s algorithms: a token with no kid among two RSA keys: %v, want refused for naming no key", name, err)
		}
		if err := verify(v, fuzzSign(t, jose.RS256, r2, "r2", claims)); err != nil {
			t.Errorf("%s algorithms: the same token naming r2: %v", name, err)
		}
		if err := verify(v, fuzzSign(t, jose.ES256, ec, "", claims)); err != nil {
			t.Errorf("%s algorithms: a token with no kid, of the issuer's one ES256 key: %v", name, err)
		}
	}

	one := issuer(jose.JSONWebKey{Key: &r1.PublicKey, KeyID: "r1", Use: "sig"},
		jose.JSONWebKey{Key: &ec.PublicKey, KeyID: "e1", Use: "sig"})
	if err := verify(one, fuzzSign(t, jose.RS256, r1, "", claims)); err != nil {
		t.Errorf("a token with no kid, of the issuer's one RSA key: %v", err)
	}
	if err := verify(one, fuzzSign(t, jose.RS256, r2, "", claims)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a token with no kid, of a key the issuer does not hold: %v", err)
	}
	if err := verify(one, fuzzSign(t, jose.ES384, mustEC(t, elliptic.P384()), "", claims)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a token with no kid, of an algorithm no key of the issuer's fits: %v", err)
	}
}

func mustEC(t *testing.T, c elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
