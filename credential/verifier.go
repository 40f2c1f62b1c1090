package credential

import (
	"context"
)

// Verifier verifies the bearer tokens a server accepts: tally's own,
// against its KeySet. It needs no database; only an OpenID Connect
// issuer's keys come from the network, fetched in the background.
type Verifier struct {
	own *KeySet
}

// NewVerifier verifies tally's own tokens against own (nil or empty: none
// is accepted).
func NewVerifier(own *KeySet) *Verifier {
	return &Verifier{own: own}
}

// Verify checks token and returns its identity; an error
// wrapping ErrInvalid when it is refused, or ErrUnavailable when its
// issuer's keys could not be fetched yet. The token's unverified "iss"
// only chooses the keys it is checked against.
func (v *Verifier) Verify(ctx context.Context, token string) (Identity, error) {
	return v.own.verify(token)
}
