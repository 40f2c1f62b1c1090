package credential

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// OIDCConfig is one OpenID Connect issuer whose tokens a Verifier
// accepts, and how its keys are kept.
type OIDCConfig struct {
	// Issuer is the issuer's URL, exactly as its tokens' "iss" and its
	// discovery document spell it. Its discovery document is at Issuer
	// + "/.well-known/openid-configuration". It must be https, or http
	// for a loopback host (a local issuer, tests).
	Issuer string
	// Audience is what a token's "aud" must name: tally's client id (or
	// resource name) at the issuer. Required.
	Audience string
	// HTTPClient fetches the discovery document and the keys. Default: a
	// client with a 10 s timeout.
	HTTPClient *http.Client
	// Logger logs each fetch that fails and each key set that differs from
	// the last, never a token. Default: discard.
	Logger *slog.Logger
	// Refresh is the time between two fetches of the keys, once one
	// succeeded. Default 5 min.
	Refresh time.Duration
	// MinRefresh is the least time between the start of a fetch and an
	// early one asked for by a token signed by a key id the issuer's keys
	// lack. Default 30 s.
	MinRefresh time.Duration
	// RetryMin is the wait after a failed fetch; it doubles with each
	// failure in a row, up to Refresh, with jitter. Default 1 s.
	RetryMin time.Duration
	// AdminClaim, when set, is the claim whose value AdminValue makes the
	// token's principal an admin (credential.RoleAdmin): a claim that is
	// that string, or an array holding it ("groups": ["tally-admins"]).
	// Default: no token of this issuer is an admin's.
	AdminClaim string
	AdminValue string
	// CacheSize is how many verified tokens are remembered, by hash, so
	// that a token presented again is not checked again while the key
	// that verified it (that very key, by its thumbprint) is still held.
	// Default 16384; negative: none.
	CacheSize int
	// CacheTTL is how long a verified token is remembered at most, its own
	// expiry being sooner or not: a token that claims to expire in a
	// thousand years is checked again after it. Default 10 min.
	CacheTTL time.Duration
}

// fetchTimeout bounds one fetch: the discovery document and the keys.
const fetchTimeout = 10 * time.Second

func (c OIDCConfig) withDefaults() OIDCConfig {
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: fetchTimeout}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Refresh == 0 {
		c.Refresh = 5 * time.Minute
	}
	if c.MinRefresh == 0 {
		c.MinRefresh = 30 * time.Second
	}
	if c.RetryMin == 0 {
		c.RetryMin = time.Second
	}
	if c.CacheSize == 0 {
		c.CacheSize = 1 << 14
	}
	if c.CacheTTL == 0 {
		c.CacheTTL = 10 * time.Minute
	}
	return c
}

func (c OIDCConfig) validate() error {
	if err := checkFetchURL(c.Issuer); err != nil {
		return fmt.Errorf("OpenID Connect issuer %q: %w", c.Issuer, err)
	}
	switch {
	case c.Audience == "":
		return fmt.Errorf("OpenID Connect issuer %s: no audience: give the client id its tokens name in \"aud\"", c.Issuer)
	case c.AdminClaim != "" && c.AdminValue == "":
		return fmt.Errorf("OpenID Connect issuer %s: the admin claim %q has no value to match", c.Issuer, c.AdminClaim)
	case c.Refresh < 0 || c.MinRefresh < 0 || c.RetryMin < 0 || c.CacheTTL < 0:
		return fmt.Errorf("OpenID Connect issuer %s: Refresh, MinRefresh, RetryMin and CacheTTL must not be negative", c.Issuer)
	}
	return nil
}

// checkFetchURL says whether keys may be fetched from u: an absolute https
// URL, or http to a loopback host, with no query or fragment.
func checkFetchURL(u string) error {
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %w", err)
	case p.Host == "" || p.User != nil || p.RawQuery != "" || p.Fragment != "":
		return errors.New("must be an absolute URL with a host and no user, query or fragment")
	case p.Scheme == "https":
		return nil
	case p.Scheme == "http" && isLoopback(p.Hostname()):
		return nil
	default:
		return errors.New("must be https (http only for a loopback host)")
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// signingAlgs are the algorithms an issuer's token may be signed with:
// asymmetric ones only. "none" and HMAC are never taken, so neither an
// unsigned token nor one "signed" with a public key as a secret passes.
var signingAlgs = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.EdDSA,
}

// OIDCIssuer verifies the tokens of one OpenID Connect issuer against the
// keys its Run fetched last. It owns those keys: it fetches them (never on
// a request's path), keeps the last set fetched while the issuer does not
// answer, and fetches early, at a bounded rate, when a token names a key
// id the set lacks. A token that verified is remembered by its hash
// (CacheSize) until it expires or for CacheTTL, whichever is sooner, and
// taken again while the key that verified it (by its thumbprint, not its
// kid) is held.
type OIDCIssuer struct {
	cfg      OIDCConfig
	keys     *remoteKeys
	verifier *oidc.IDTokenVerifier
	cache    *tokenCache
	running  atomic.Bool
}

// NewOIDCIssuer checks cfg and returns the issuer; it does no I/O. Its
// tokens get ErrUnavailable until Run has fetched its keys once.
func NewOIDCIssuer(cfg OIDCConfig) (*OIDCIssuer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	keys := &remoteKeys{early: make(chan struct{}, 1)}
	return &OIDCIssuer{
		cfg:  cfg,
		keys: keys,
		// go-oidc checks the signature (with keys), the algorithm, "iss",
		// "aud", "exp" and "nbf". Now runs Leeway late, so that "exp" has
		// the leeway tally's own tokens have.
		verifier: oidc.NewVerifier(cfg.Issuer, keys, &oidc.Config{
			ClientID:             cfg.Audience,
			SupportedSigningAlgs: signingAlgs,
			Now:                  func() time.Time { return time.Now().Add(-Leeway) },
		}),
		cache: newTokenCache(cfg.CacheSize),
	}, nil
}

// Run keeps the issuer's keys until ctx is cancelled: it fetches them at
// once, again after each failure (after RetryMin, doubling up to
// Refresh), every Refresh after a success, and early when a token asks
// (MinRefresh after the last fetch began, at the soonest). A failed fetch
// leaves the keys as they were. Run returns nil when ctx is cancelled, and
// an error at once if the issuer's Run is already running.
func (o *OIDCIssuer) Run(ctx context.Context) error {
	if !o.running.CompareAndSwap(false, true) {
		return fmt.Errorf("OpenID Connect issuer %s: Run is already running", o.cfg.Issuer)
	}
	defer o.running.Store(false)
	log := o.cfg.Logger.With("component", "credential", "issuer", o.cfg.Issuer)

	var last time.Time // when the last fetch began
	due := time.Now()
	failures := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.keys.early:
			if soonest := last.Add(o.cfg.MinRefresh); soonest.Before(due) {
				due = soonest
				timer.Reset(time.Until(due))
			}
			continue
		case <-timer.C:
		}

		last = time.Now()
		changed, err := o.fetch(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			wait := backoff(o.cfg.RetryMin, o.cfg.Refresh, failures)
			if o.keys.cur.Load() == nil {
				log.WarnContext(ctx, "cannot fetch the issuer's keys; its tokens are answered unavailable until a fetch succeeds",
					"err", err, "failures", failures, "retry_in", wait)
			} else {
				log.WarnContext(ctx, "cannot fetch the issuer's keys; the keys fetched last stay in use",
					"err", err, "failures", failures, "retry_in", wait)
			}
			due = time.Now().Add(wait)
		default:
			if changed != nil {
				log.InfoContext(ctx, "fetched the issuer's keys", "kids", changed)
			}
			failures = 0
			due = time.Now().Add(o.cfg.Refresh)
		}
		timer.Reset(time.Until(due))
	}
}

// claimHolds reports whether a claim's value is want, or an array that
// holds it.
func claimHolds(v any, want string) bool {
	switch v := v.(type) {
	case string:
		return v == want
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok && s == want {
				return true
			}
		}
	}
	return false
}

// backoff is the wait after the n-th failure in a row: first doubled n-1
// times, at most most, less up to half of it at random so that intakes
// started together do not ask together.
func backoff(first, most time.Duration, n int) time.Duration {
	d := most
	if n < 32 && first<<(n-1) > 0 && first<<(n-1) < most {
		d = first << (n - 1)
	}
	return d - rand.N(d/2+1)
}

// fetch reads the discovery document and the keys it names, and keeps
// them. It returns the key ids when they differ from the last set's.
func (o *OIDCIssuer) fetch(ctx context.Context) (changed []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	jwksURL, err := o.discover(ctx)
	if err != nil {
		return nil, err
	}
	set, err := o.fetchKeys(ctx, jwksURL)
	if err != nil {
		return nil, err
	}
	return o.keys.store(set), nil
}

// verify checks token against the issuer's keys and claims, from the cache
// when the same token verified before, its key is still held and it has
// not expired.
func (o *OIDCIssuer) verify(ctx context.Context, token string) (Identity, error) {
	set := o.keys.cur.Load()
	if set == nil {
		o.keys.askEarly()
		return Identity{}, fmt.Errorf("%w: issuer %s", ErrUnavailable, o.cfg.Issuer)
	}
	sum := sha256.Sum256([]byte(token))
	now := time.Now()
	if id, thumb, ok := o.cache.get(sum, now); ok && set.holds(thumb) {
		return id, nil
	}
	var by signer
	t, err := o.verifier.Verify(context.WithValue(ctx, signerKey{}, &by), token)
	if err != nil {
		return Identity{}, invalid("%v", err)
	}
	if t.Subject == "" {
		return Identity{}, invalid("it names no subject")
	}
	id := Identity{PrincipalID: PrincipalIDFor(t.Issuer, t.Subject), Issuer: t.Issuer, KeyID: by.kid, ExpiresAt: t.Expiry,
		IssuedAt: t.IssuedAt, Role: RoleVoter}
	if o.cfg.AdminClaim != "" {
		var claims map[string]any
		if err := t.Claims(&claims); err != nil {
			return Identity{}, invalid("its claims cannot be read: %v", err)
		}
		if claimHolds(claims[o.cfg.AdminClaim], o.cfg.AdminValue) {
			id.Role = RoleAdmin
		}
	}
	until := now.Add(o.cfg.CacheTTL)
	if exp := t.Expiry.Add(Leeway); exp.Before(until) {
		until = exp
	}
	o.cache.put(sum, id, by.thumb, until)
	return id, nil
}
