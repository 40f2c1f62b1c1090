package intake

import (
	"context"
	"time"

	"tally/ledger"
	"tally/stream"
)

// voter is an authenticated principal with what all its votes send to Redis
// made once: the enqueue script's arguments that depend on the principal
// only, boxed as go-redis takes them.
type voter struct {
	ledger.Principal
	// expiresAt is when the token that authenticated it expires; zero
	// when it does not.
	expiresAt  time.Time
	shard      int
	idArg      any    // the principal id
	rateKeyArg any    // the key of its rate-limit bucket
	idemPrefix string // its idempotency keys are idemPrefix + event id; "" if not
}

func newVoter(p ledger.Principal, keys stream.Keys) *voter {
	v := &voter{Principal: p, shard: keys.ShardOf(p.ID), idArg: p.ID, rateKeyArg: keys.RateLimit(p.ID)}
	// The stream package names the record; use the shortcut only where its
	// name is this concatenation.
	if prefix := keys.Idempotency(p.ID, ""); keys.Idempotency(p.ID, "e-1") == prefix+"e-1" {
		v.idemPrefix = prefix
	}
	return v
}

// idempotencyKey is the key of the record of the voter's clientEventID.
func (v *voter) idempotencyKey(keys stream.Keys, clientEventID string) string {
	if v.idemPrefix != "" {
		return v.idemPrefix + clientEventID
	}
	return keys.Idempotency(v.ID, clientEventID)
}

// boundedContext is ctx bounded by timeout from now and by deadline, unless
// it is zero.
func boundedContext(ctx context.Context, timeout time.Duration, deadline time.Time) (context.Context, context.CancelFunc) {
	d := time.Now().Add(timeout)
	if !deadline.IsZero() && deadline.Before(d) {
		d = deadline
	}
	return context.WithDeadline(ctx, d)
}
