package intake

import (
	"fmt"
	"hash/maphash"
	"testing"
	"time"

	"tally/ledger"
	"tally/stream"
)

// The voters cache gives a principal's next vote the voter its last one
// made, a token that says something else of the principal a voter of its
// own, and a principal whose slot another took a new one.
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
	// A principal whose slot another took gets a voter of its own again.
	other := ledger.Principal{ID: "bob", CreatedAt: created, Role: ledger.RoleVoter}
	for i := 0; maphash.String(vs.seed, other.ID)%voterSlots != maphash.String(vs.seed, p.ID)%voterSlots; i++ {
		other.ID = fmt.Sprintf("p%d", i)
	}
	if o := vs.get(other, exp); o.Principal != other || o.rateKey != keys.RateLimit(other.ID) {
		t.Errorf("%s, of alice's slot, got voter %+v", other.ID, o)
	}
	if again := vs.get(p, exp); again == v || again.Principal != p || again.idempotencyKey("e-1") != keys.Idempotency("alice", "e-1") {
		t.Errorf("alice, her slot taken, got %p (%+v), want a new voter of her own", again, again.Principal)
	}
}
