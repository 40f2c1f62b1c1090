package credential

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tally/vote"
)

// Issuer is the "iss" of tally's own tokens.
const Issuer = "tally"

// Leeway is the clock skew allowed when checking a token's times.
const Leeway = 30 * time.Second

// ErrInvalid is the error of every token refused: malformed, signed by no
// key the verifier holds, with another algorithm, of an issuer it does not
// trust, for another audience, expired or not yet valid. Its message says
// which, for the log; a client is told only that the token is invalid.
var ErrInvalid = errors.New("invalid token")

// ErrUnavailable: the token names an OpenID Connect issuer whose keys
// could not be fetched yet, so it can be neither accepted nor refused.
var ErrUnavailable = errors.New("the issuer's keys are not available yet")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Identity is who a verified token says its bearer is.
type Identity struct {
	PrincipalID string
	// CreatedAt is the principal's creation time (rounded down to the
	// second) for tally's own tokens; zero for an OpenID Connect token.
	CreatedAt time.Time
	// ExpiresAt is the token's expiry; zero when it has none.
	ExpiresAt time.Time
	// IssuedAt is when the token was issued ("iat", whole seconds); zero
	// when it does not say. A principal reissued refuses its tokens
	// issued before the reissue: the caller checks it, as it does the
	// revocations.
	IssuedAt time.Time
	// Issuer is Issuer for tally's own tokens, else the OpenID Connect
	// issuer's URL.
	Issuer string
	// KeyID names the key that signed the token.
	KeyID string
	// Role is RoleAdmin for a principal that may manage polls and
	// principals, else RoleVoter.
	Role string
}

// The roles a token may grant: tally's own tokens name theirs ("role",
// absent for a voter); an OpenID Connect token is an admin's when it
// carries the claim OIDCConfig.AdminClaim names.
const (
	RoleVoter = "voter"
	RoleAdmin = "admin"
)

// claims are the claims of tally's own tokens.
type claims struct {
	jwt.RegisteredClaims
	Created int64 `json:"created"`
	// Role is RoleAdmin, or absent for RoleVoter.
	Role string `json:"role,omitempty"`
	// dates hold the dates the fast path of UnmarshalJSON read, where
	// ExpiresAt, NotBefore and IssuedAt then point, so that reading a
	// token's dates allocates none (see claims.go).
	dates [3]jwt.NumericDate
}

// Issue returns a voter's token for principalID, created at createdAt,
// signed by k. A zero expires issues a token without expiry.
func (k Key) Issue(principalID string, createdAt, expires time.Time) (string, error) {
	return k.IssueRole(principalID, RoleVoter, createdAt, expires)
}

// IssueRole is Issue for a principal of role, RoleVoter or RoleAdmin.
func (k Key) IssueRole(principalID, role string, createdAt, expires time.Time) (string, error) {
	return k.IssueRoleAt(principalID, role, createdAt, time.Now(), expires)
}

// IssueRoleAt is IssueRole with the token's issue time ("iat", rounded
// down to the second) issuedAt: a reissued principal's new token is
// issued at the time its earlier ones stopped being valid.
func (k Key) IssueRoleAt(principalID, role string, createdAt, issuedAt, expires time.Time) (string, error) {
	if !vote.ValidID(principalID) {
		return "", fmt.Errorf("issue token: principal id %q is not 1-64 of [A-Za-z0-9_-]", principalID)
	}
	if role != RoleVoter && role != RoleAdmin {
		return "", fmt.Errorf("issue token: the role is %q; it must be %s or %s", role, RoleVoter, RoleAdmin)
	}
	c := claims{RegisteredClaims: jwt.RegisteredClaims{Issuer: Issuer, Subject: principalID, IssuedAt: jwt.NewNumericDate(issuedAt)},
		Created: createdAt.Unix()}
	if role == RoleAdmin {
		c.Role = RoleAdmin
	}
	if !expires.IsZero() {
		c.ExpiresAt = jwt.NewNumericDate(expires)
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	t.Header["kid"] = k.ID
	token, err := t.SignedString(k.secret)
	if err != nil {
		return "", fmt.Errorf("issue token: %w", err)
	}
	return token, nil
}

// ownParser parses and checks tally's own tokens: only HS256 is taken,
// whatever a token's header says, and only the issuer Issuer.
var ownParser = jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
	jwt.WithIssuer(Issuer), jwt.WithLeeway(Leeway))

// verify checks a token of tally's own against the keys of s and returns
// its identity, or an error wrapping ErrInvalid.
func (s *KeySet) verify(token string) (Identity, error) {
	keyFunc := noKey
	if s != nil {
		keyFunc = s.keyFunc
	}
	c := claimsPool.Get().(*claims)
	defer claimsPool.Put(c)
	t, err := ownParser.ParseWithClaims(token, c, keyFunc)
	if err != nil {
		return Identity{}, invalid("%v", err)
	}
	kid, _ := t.Header["kid"].(string)
	if !vote.ValidID(c.Subject) {
		return Identity{}, invalid("its subject is not a principal id")
	}
	role := RoleVoter
	switch c.Role {
	case "", RoleVoter:
	case RoleAdmin:
		role = RoleAdmin
	default:
		return Identity{}, invalid("its role %.20q is not one tally grants", c.Role)
	}
	id := Identity{PrincipalID: c.Subject, CreatedAt: time.Unix(c.Created, 0), Issuer: Issuer, KeyID: kid, Role: role}
	if c.ExpiresAt != nil {
		id.ExpiresAt = c.ExpiresAt.Time
	}
	if c.IssuedAt != nil {
		id.IssuedAt = c.IssuedAt.Time
	}
	return id, nil
}

// claimsPool recycles the claims verify decodes a token's into: its
// identity copies out what it keeps, and UnmarshalJSON starts from zero.
var claimsPool = sync.Pool{New: func() any { return new(claims) }}

// keyFor gives the key that checks the signature of t, a token of
// tally's own: the HMAC of the key its "kid" names (hs256 checks it).
func (s *KeySet) keyFor(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	if k, ok := s.macs[kid]; ok {
		return k, nil
	}
	return noKey(t)
}

// noKey refuses t: it names a key that is not held.
func noKey(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	return nil, fmt.Errorf("signed by key %q, which this server does not hold", kid)
}

// ParseExpiry reads when a token should expire: a duration from now
// ("720h") or an RFC 3339 time, in the future either way. "" is no
// expiry (a zero time).
func ParseExpiry(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("expiry %s: give a positive duration", v)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("expiry %q: give a duration (720h) or an RFC 3339 time (2027-01-31T00:00:00Z)", v)
	}
	if !t.After(now) {
		return time.Time{}, fmt.Errorf("expiry %s is in the past", v)
	}
	return t, nil
}
