package intake

import (
	"hash/maphash"
	"net"
	"net/netip"
	"sync"
)

// This file owns the bounds on what one client holds open: connections
// per client address (Config.MaxConnsPerAddr, limit_listener.go) and live
// streams per client address and per principal (Config.MaxLivePerAddr,
// Config.MaxLivePerPrincipal, live.go). Without them one client can take
// every connection or every live slot, and with them every other client.
// The global caps (MaxConns, MaxLiveViewers) stay beside them.

// holds counts what each key holds open, up to max a key. Keys are keyed
// hashes, as keyedLimiter's are: the table holds no address or principal
// in clear, and nobody without the process's seed can choose inputs that
// collide. The table needs no eviction: a key is in it only while it holds
// something, so it never has more entries than the global cap allows
// open.
type holds struct {
	max  int
	seed maphash.Seed

	mu sync.Mutex
	n  map[uint64]int
}

// newHolds returns a bound of max a key, or nil for no bound (max < 0).
func newHolds(max int) *holds {
	if max < 0 {
		return nil
	}
	return &holds{max: max, seed: maphash.MakeSeed(), n: map[uint64]int{}}
}

// acquire takes one hold of key, or reports false when key holds max
// already. A nil holds always takes it.
func (h *holds) acquire(key uint64) bool {
	if h == nil {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[key] >= h.max {
		return false
	}
	h.n[key]++
	return true
}

// release gives back one hold of key that acquire took.
func (h *holds) release(key uint64) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[key] <= 1 {
		delete(h.n, key)
		return
	}
	h.n[key]--
}

// len is the number of keys that hold something.
func (h *holds) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.n)
}

// addrKey is the key of the client address of remoteAddr; 0 for a nil
// holds, which takes every key.
func (h *holds) addrKey(remoteAddr string) uint64 {
	if h == nil {
		return 0
	}
	return addrHash(h.seed, remoteAddr)
}

// stringKey is the key of s (a principal id); 0 for a nil holds.
func (h *holds) stringKey(s string) uint64 {
	if h == nil {
		return 0
	}
	return maphash.String(h.seed, s)
}

// addrHash is the keyed hash of the client address of remoteAddr
// ("IP:port"): of its IP, or for IPv6 of its /64, since one host commonly
// holds a whole /64. An address that does not parse is hashed as it is
// written.
func addrHash(seed maphash.Seed, remoteAddr string) uint64 {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return maphash.String(seed, host)
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		ip = p.Addr()
	}
	b := ip.As16()
	return maphash.Bytes(seed, b[:])
}
