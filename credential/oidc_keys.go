package credential

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/go-jose/go-jose/v4"
)

// maxDocumentBytes bounds a discovery document or a JWKS read.
const maxDocumentBytes = 1 << 20

// discover reads the issuer's discovery document (OpenID Connect Discovery
// 1.0, section 4) and returns its jwks_uri. The document must name the
// configured issuer exactly, as section 4.3 asks.
func (o *OIDCIssuer) discover(ctx context.Context) (string, error) {
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := o.getJSON(ctx, strings.TrimSuffix(o.cfg.Issuer, "/")+"/.well-known/openid-configuration", &doc); err != nil {
		return "", fmt.Errorf("discovery: %w", err)
	}
	if doc.Issuer != o.cfg.Issuer {
		return "", fmt.Errorf("discovery: the issuer calls itself %q, not %q: configure the issuer URL as it spells it", doc.Issuer, o.cfg.Issuer)
	}
	if err := checkFetchURL(doc.JWKSURI); err != nil {
		return "", fmt.Errorf("discovery: jwks_uri %q: %w", doc.JWKSURI, err)
	}
	return doc.JWKSURI, nil
}

// fetchKeys reads the JWKS at url and returns the signing keys in it. Keys
// it cannot use (another use, a symmetric or private key, a type go-jose
// does not know) are left out; a set with no key left is an error, so that
// the keys held stay as they were.
func (o *OIDCIssuer) fetchKeys(ctx context.Context, url string) (*keySet, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := o.getJSON(ctx, url, &doc); err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	var keys []jose.JSONWebKey
	for _, raw := range doc.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil || !usableKey(k) {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("keys: %s holds no public signing key", url)
	}
	return newKeySet(keys), nil
}

// usableKey: a public key of a type signingAlgs can verify with, for
// signing.
func usableKey(k jose.JSONWebKey) bool {
	if k.Use != "" && k.Use != "sig" {
		return false
	}
	switch k.Key.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		return true
	}
	return false
}

func (o *OIDCIssuer) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := o.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if len(body) > maxDocumentBytes {
		return fmt.Errorf("GET %s: more than %d bytes", url, maxDocumentBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// keySet is the keys one fetch of an issuer's JWKS gave.
type keySet struct {
	byID map[string][]heldKey // by kid; keys without one under ""
	// byAlg are the keys that may verify a signature of each of
	// signingAlgs (keyFits): a token that names no key is checked
	// against these.
	byAlg map[string][]heldKey
	// thumbs are the keys' thumbprints: a cached token is taken again
	// only while the very key that verified it is held, whatever its kid.
	thumbs map[thumbprint]struct{}
}

// thumbprint is a key's RFC 7638 JWK thumbprint (SHA-256): it names the
// key itself, where a kid is only what the issuer calls it.
type thumbprint [sha256.Size]byte

// heldKey is a key of an issuer and its thumbprint.
type heldKey struct {
	jose.JSONWebKey
	thumb thumbprint
}

// newKeySet is the set of keys; a key whose thumbprint cannot be made
// (of a type go-jose does not know) is left out.
func newKeySet(keys []jose.JSONWebKey) *keySet {
	s := &keySet{byID: make(map[string][]heldKey), byAlg: make(map[string][]heldKey), thumbs: make(map[thumbprint]struct{})}
	for _, k := range keys {
		t, err := k.Thumbprint(crypto.SHA256)
		if err != nil || len(t) != sha256.Size {
			continue
		}
		h := heldKey{JSONWebKey: k, thumb: thumbprint(t)}
		s.thumbs[h.thumb] = struct{}{}
		s.byID[k.KeyID] = append(s.byID[k.KeyID], h)
		for _, alg := range signingAlgs {
			if keyFits(k, alg) {
				s.byAlg[alg] = append(s.byAlg[alg], h)
			}
		}
	}
	return s
}

// keyFits says whether k may verify a signature of alg: its own "alg"
// when it names one, else its type (an RSA key for RS* and PS*, an ECDSA
// key for ES* of its curve, an Ed25519 key for EdDSA).
func keyFits(k jose.JSONWebKey, alg string) bool {
	if k.Algorithm != "" {
		return k.Algorithm == alg
	}
	switch key := k.Key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		return alg == "ES"+strconv.Itoa(key.Curve.Params().BitSize) ||
			alg == "ES512" && key.Curve.Params().BitSize == 521
	case ed25519.PublicKey:
		return alg == string(jose.EdDSA)
	}
	return false
}

// holds says whether the set has the key of thumbprint t.
func (s *keySet) holds(t thumbprint) bool {
	_, ok := s.thumbs[t]
	return ok
}

func (s *keySet) ids() []string {
	ids := make([]string, 0, len(s.byID))
	for id := range s.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// remoteKeys is go-oidc's KeySet for one issuer: the keys fetched last,
// read with no lock and no I/O.
type remoteKeys struct {
	cur atomic.Pointer[keySet]
	// early holds a wish for an early fetch (a token named a key id the
	// set lacks) until Run takes it.
	early chan struct{}
}

// store makes set the keys in use and returns its key ids if they differ
// from the last set's (or it is the first).
func (r *remoteKeys) store(set *keySet) (changed []string) {
	old := r.cur.Swap(set)
	ids := set.ids()
	if old == nil || !slices.Equal(ids, old.ids()) {
		return ids
	}
	return nil
}

// askEarly asks Run for an early fetch, without waiting.
func (r *remoteKeys) askEarly() {
	select {
	case r.early <- struct{}{}:
	default:
	}
}

// signerKey is the context key under which verify passes a *signer that
// VerifySignature sets to the key that verified the token.
type signerKey struct{}

// signer is the key that verified a token: its id and its thumbprint.
type signer struct {
	kid   string
	thumb thumbprint
}

var errNoKeys = errors.New("the issuer's keys were not fetched yet")

// VerifySignature implements oidc.KeySet: it checks the token's signature
// against the keys held, never fetching any. A key id the set lacks is
// refused at once and asks Run for an early fetch.
func (r *remoteKeys) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	set := r.cur.Load()
	if set == nil {
		r.askEarly()
		return nil, errNoKeys
	}
	jws, err := jose.ParseSignedCompact(token, algorithms)
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("not one signature")
	}
	h := jws.Signatures[0].Header
	var candidates []heldKey
	if h.KeyID == "" {
		// A token that names no key is checked against the one key that
		// can have signed it, never tried against each: with a JWKS of
		// thousands of keys, each forged token would cost seconds of CPU.
		candidates = set.byAlg[h.Algorithm]
		if len(candidates) > 1 {
			return nil, fmt.Errorf("it names no key id (\"kid\" in its header), and the issuer holds %d keys for %s: "+
				"it must name the key that signed it", len(candidates), h.Algorithm)
		}
	} else {
		candidates = set.byID[h.KeyID]
		if len(candidates) == 0 {
			r.askEarly()
			return nil, fmt.Errorf("signed by key %q, which is not in the issuer's keys", h.KeyID)
		}
	}
	for _, k := range candidates {
		if !keyFits(k.JSONWebKey, h.Algorithm) {
			continue
		}
		if payload, err := jws.Verify(k.Key); err == nil {
			if p, ok := ctx.Value(signerKey{}).(*signer); ok {
				*p = signer{kid: k.KeyID, thumb: k.thumb}
			}
			return payload, nil
		}
	}
	return nil, fmt.Errorf("the signature does not verify with the issuer's key %q", h.KeyID)
}

var algorithms = func() []jose.SignatureAlgorithm {
	a := make([]jose.SignatureAlgorithm, len(signingAlgs))
	for i, s := range signingAlgs {
		a[i] = jose.SignatureAlgorithm(s)
	}
	return a
}()
