package intake

import (
	"fmt"
	"testing"
	"time"

	"tally/ledger"
	"tally/stream"
)

// The voters cache gives a principal's next vote the voter its last one
// made, a token that says something else of the principal a voter of its
// own, and holds at most maxVoters.
func TestVotersCache(t *testing.T) {
	keys, err := stream.NewKeys("tally", 4)
	if err != nil {
		t.Fatal(err)
	}
	vs := newVoters(keys)
	created := time.Unix(1_790_000_000, 0)
	p := ledger.Principal{ID: "alice", CreatedAt: created, Role: ledger.RoleVoter}
	exp := created.Add(time.Hour)
	v := vs.get(p, exp)
	if again := vs.get(p, exp); again != v {
		t.Error("the same principal and token got a new voter")
	}
	if v.idempotencyKey("e-1") != keys.Idempotency("alice", "e-1") || v.shard != keys.ShardOf("alice") ||
		v.rateKey != keys.RateLimit("alice") || !v.expiresAt.Equal(exp) {
		t.Errorf("voter %+v does not hold alice's keys and expiry", v)
	}
	admin := p
	admin.Role = ledger.RoleAdmin
	for name, got := range map[string]*voter{
		"another expiry":     vs.get(p, exp.Add(time.Hour)),
		"another role":       vs.get(admin, exp),
		"another created_at": vs.get(ledger.Principal{ID: "alice", CreatedAt: created.Add(time.Second), Role: ledger.RoleVoter}, exp),
	} {
		if got == v || got.Principal.ID != "alice" {
			t.Errorf("%s: got alice's cached voter %p (%+v), want one of its own", name, got, got.Principal)
		}
	}
	for i := range maxVoters + 1 {
		vs.get(ledger.Principal{ID: fmt.Sprintf("p%d", i)}, exp)
	}
	if n := len(vs.m); n > maxVoters {
		t.Errorf("the cache holds %d voters, more than %d", n, maxVoters)
	}
}
