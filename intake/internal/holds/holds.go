// Package holds owns the bounds on what one client holds open:
// connections per client address (intake's Config.MaxConnsPerAddr) and
// live streams per client address and per principal (Config.MaxLivePerAddr,
// Config.MaxLivePerPrincipal, package live). Without them one client can
// take every connection or every live slot, and with them every other
// client. The global caps (MaxConns, MaxLiveViewers) stay beside them. It
// keeps counts in memory only: no address or principal in clear, nothing
// logged.
package holds

import (
	"hash/maphash"
	"net"
	"net/netip"
	"sync"
)

// Holds counts what each key holds open, up to max a key. Keys are keyed
// hashes, as intake's limits' are: the table holds no address or principal
// in clear, and nobody without the process's seed can choose inputs that
// collide. The table needs no eviction: a key is in it only while it holds
// something, so it never has more entries than the global cap allows
// open.
type Holds struct {
	max  int
	seed maphash.Seed

	mu sync.Mutex
	n  map[uint64]int
}

// New returns a bound of max a key, or nil for no bound (max < 0).
func New(max int) *Holds {
	if max < 0 {
		return nil
	}
	return &Holds{max: max, seed: maphash.MakeSeed(), n: map[uint64]int{}}
}

// Acquire takes one hold of key, or reports false when key holds max
// already. A nil Holds always takes it.
func (h *Holds) Acquire(key uint64) bool {
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

// Release gives back one hold of key that Acquire took.
func (h *Holds) Release(key uint64) {
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

// Len is the number of keys that hold something.
func (h *Holds) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.n)
}

// AddrKey is the key of the client address of remoteAddr; 0 for a nil
// Holds, which takes every key.
func (h *Holds) AddrKey(remoteAddr string) uint64 {
	if h == nil {
		return 0
	}
	return AddrHash(h.seed, remoteAddr)
}

// StringKey is the key of s (a principal id); 0 for a nil Holds.
func (h *Holds) StringKey(s string) uint64 {
	if h == nil {
		return 0
	}
	return maphash.String(h.seed, s)
}

// AddrHash is the keyed hash of the client address of remoteAddr
// ("IP:port"): of its IP, or for IPv6 of its /64, since one host commonly
// holds a whole /64. An address that does not parse is hashed as it is
// written.
func AddrHash(seed maphash.Seed, remoteAddr string) uint64 {
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
