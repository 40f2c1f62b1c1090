package credential

import (
	"sync"
	"time"
)

// tokenCache remembers the identity of OpenID Connect tokens that
// verified, and the thumbprint of the key that verified each, by SHA-256
// of the token, until the time its caller gives: a token verified again
// costs a hash instead of an RSA or ECDSA check. The caller checks that
// the key that verified it is still held. When full, it drops the
// expired entries, and all of them if none has expired. A cache of size
// zero or less remembers nothing.
type tokenCache struct {
	max int
	mu  sync.RWMutex
	m   map[[32]byte]cachedIdentity
}

type cachedIdentity struct {
	id    Identity
	thumb thumbprint
	until time.Time
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{max: max, m: make(map[[32]byte]cachedIdentity)}
}

func (c *tokenCache) get(sum [32]byte, now time.Time) (Identity, thumbprint, bool) {
	c.mu.RLock()
	e, ok := c.m[sum]
	c.mu.RUnlock()
	if !ok || !now.Before(e.until) {
		return Identity{}, thumbprint{}, false
	}
	return e.id, e.thumb, true
}

func (c *tokenCache) put(sum [32]byte, id Identity, thumb thumbprint, until time.Time) {
	if c.max <= 0 {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for k, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= c.max {
			clear(c.m)
		}
	}
	c.m[sum] = cachedIdentity{id: id, thumb: thumb, until: until}
}
