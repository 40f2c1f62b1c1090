package credential

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n        int
		from, to time.Duration
	}{
		{1, 500 * time.Millisecond, time.Second},
		{2, time.Second, 2 * time.Second},
		{4, 4 * time.Second, 8 * time.Second},
		{7, 30 * time.Second, time.Minute},
		{100, 30 * time.Second, time.Minute},
	} {
		for range 20 {
			if d := backoff(time.Second, time.Minute, c.n); d < c.from || d > c.to {
				t.Fatalf("backoff after %d failures: %v, not in [%v, %v]", c.n, d, c.from, c.to)
			}
		}
	}
}

// TestTokenCache: an entry is found until it expires; a full cache drops
// the expired entries first, all of them if none expired; a cache of size
// zero or less remembers nothing.
func TestTokenCache(t *testing.T) {
	t.Parallel()
	now := time.Now()
	c := newTokenCache(2)
	a, b, x := [32]byte{1}, [32]byte{2}, [32]byte{3}
	c.put(a, Identity{PrincipalID: "a"}, thumbprint{9}, now.Add(time.Hour))
	if id, thumb, ok := c.get(a, now); !ok || id.PrincipalID != "a" || thumb != (thumbprint{9}) {
		t.Fatalf("get a: %+v, %x, %v", id, thumb, ok)
	}
	if _, _, ok := c.get(a, now.Add(time.Hour)); ok {
		t.Fatal("a found at its expiry")
	}
	c.put(b, Identity{PrincipalID: "b"}, thumbprint{}, now.Add(-time.Second)) // expired
	c.put(x, Identity{PrincipalID: "x"}, thumbprint{}, now.Add(time.Hour))
	if _, _, ok := c.get(a, now); !ok || len(c.m) != 2 {
		t.Fatalf("a full cache with an expired entry dropped a live one: %d entries", len(c.m))
	}
	c.put(b, Identity{PrincipalID: "b"}, thumbprint{}, now.Add(time.Hour))
	if len(c.m) != 1 {
		t.Fatalf("a full cache with none expired holds %d entries after a put, want 1", len(c.m))
	}
	off := newTokenCache(-1)
	off.put(a, Identity{}, thumbprint{}, now.Add(time.Hour))
	if _, _, ok := off.get(a, now); ok {
		t.Fatal("a cache of size -1 remembered")
	}
}
