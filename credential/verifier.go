package credential

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
)

// Verifier verifies the bearer tokens a server accepts: tally's own,
// against its KeySet, and those of the OpenID Connect issuers it trusts,
// against each issuer's keys. Verify needs no database and does no I/O:
// the issuers' keys are fetched by Run (or by each issuer's own Run).
type Verifier struct {
	own     *KeySet
	issuers map[string][]*OIDCIssuer // by Issuer URL
	list    []*OIDCIssuer            // each issuer once, in the order given
}

// NewVerifier verifies tally's own tokens against own (nil or empty: none
// is accepted) and the tokens of each of issuers. An issuer URL given more
// than once (several audiences) accepts a token any of them accepts.
func NewVerifier(own *KeySet, issuers ...*OIDCIssuer) *Verifier {
	v := &Verifier{own: own, issuers: make(map[string][]*OIDCIssuer, len(issuers))}
	for _, o := range issuers {
		if slices.Contains(v.list, o) {
			continue
		}
		v.list = append(v.list, o)
		v.issuers[o.cfg.Issuer] = append(v.issuers[o.cfg.Issuer], o)
	}
	return v
}

// Run keeps the keys of every issuer of v until ctx is cancelled: it runs
// each issuer's Run (OIDCIssuer.Run) and returns once all have returned,
// nil when ctx was cancelled. It returns at once, nil, when v trusts no
// issuer, and the error of an issuer whose Run was already running, once
// ctx is cancelled (the others run meanwhile).
func (v *Verifier) Run(ctx context.Context) error {
	errs := make([]error, len(v.list))
	var wg sync.WaitGroup
	for i, o := range v.list {
		wg.Go(func() { errs[i] = o.Run(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Issuers are the URLs of the OpenID Connect issuers v trusts, each once,
// in the order given to NewVerifier.
func (v *Verifier) Issuers() []string {
	var urls []string
	for _, o := range v.list {
		if !slices.Contains(urls, o.cfg.Issuer) {
			urls = append(urls, o.cfg.Issuer)
		}
	}
	return urls
}

// IssuersWithoutKeys are the URLs of the issuers of v whose keys were
// never fetched, in the order given to NewVerifier: their tokens get
// ErrUnavailable. None once every issuer's Run fetched its keys once.
func (v *Verifier) IssuersWithoutKeys() []string {
	var urls []string
	for _, o := range v.list {
		if o.keys.cur.Load() == nil && !slices.Contains(urls, o.cfg.Issuer) {
			urls = append(urls, o.cfg.Issuer)
		}
	}
	return urls
}

// Verify checks token and returns its identity; an error
// wrapping ErrInvalid when it is refused, or ErrUnavailable when its
// issuer's keys could not be fetched yet. The token's unverified "iss"
// only chooses the keys it is checked against.
func (v *Verifier) Verify(ctx context.Context, token string) (Identity, error) {
	iss, err := unverifiedIssuer(token)
	if err != nil {
		return Identity{}, err
	}
	if iss == Issuer {
		return v.own.verify(token)
	}
	trusted := v.issuers[iss]
	if len(trusted) == 0 {
		if len(iss) > 100 {
			iss = iss[:100] + "..."
		}
		return Identity{}, invalid("its issuer %q is not trusted", iss)
	}
	var first error
	for _, o := range trusted {
		id, err := o.verify(ctx, token)
		if err == nil {
			return id, nil
		}
		if first == nil {
			first = err
		}
	}
	return Identity{}, first
}

// maxTokenBytes bounds the token a Verifier reads: an issuer's tokens are
// a few kilobytes, tally's a few hundred bytes.
const maxTokenBytes = 16 << 10

// ownClaimsPrefix is how the claims of every token Issue makes begin, in
// base64url: 15 bytes, a whole number of base64 blocks, so a token of
// tally's own is told by a string comparison, without decoding or
// allocating (BenchmarkVerify).
var ownClaimsPrefix = base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"` + Issuer + `",`))

// unverifiedIssuer returns the "iss" of a JWS in compact form, read
// without checking anything else: the keys it chooses check it.
func unverifiedIssuer(token string) (string, error) {
	if len(token) > maxTokenBytes {
		return "", invalid("it is %d bytes long, more than %d", len(token), maxTokenBytes)
	}
	_, rest, ok1 := strings.Cut(token, ".")
	payload, sig, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(sig, ".") {
		return "", invalid("not a JWT: not three parts joined by dots")
	}
	if strings.HasPrefix(payload, ownClaimsPrefix) {
		return Issuer, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return "", invalid("its claims are not base64url: %v", err)
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", invalid("its claims are not a JSON object with a string iss: %v", err)
	}
	return c.Iss, nil
}
