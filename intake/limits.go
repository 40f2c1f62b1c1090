package intake

import (
	"hash/maphash"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/ledger"
)

// This file owns intake's limits kept in memory: failed authentications
// per client address, and reads per principal. Both stand between a flood
// and PostgreSQL: a token intake has not cached costs a lookup, and so
// does a read. Votes have their own limit, per principal in Redis (the
// enqueue script), since every intake instance must share it.

// limits are a Server's in-memory limits. A nil limiter is a limit turned
// off (a rate of +Inf).
type limits struct {
	failures *keyedLimiter // failed authentications per client address
	reads    *keyedLimiter // reads per principal
}

func newLimits(cfg Config, m *metrics) *limits {
	return &limits{
		failures: newKeyedLimiter(cfg.AuthFailureRate, cfg.AuthFailureBurst, cfg.LimitEntries,
			m.limitEvictions.WithLabelValues(limitAuthFailures)),
		reads: newKeyedLimiter(cfg.ReadRate, cfg.ReadBurst, cfg.LimitEntries,
			m.limitEvictions.WithLabelValues(limitReads)),
	}
}

// The label values of the limits in metrics.
const (
	limitAuthFailures = "auth_failures"
	limitReads        = "reads"
)

// authAttempt spends one authentication attempt of the address of
// remoteAddr (an http.Request's RemoteAddr), or returns how long to wait
// before the next one. It returns the address's key, for giveBack.
func (l *limits) authAttempt(remoteAddr string, now time.Time) (key uint64, wait time.Duration, ok bool) {
	if l.failures == nil {
		return 0, 0, true
	}
	key = l.failures.addrKey(remoteAddr)
	wait, ok = l.failures.take(key, now)
	return key, wait, ok
}

// giveBack returns the attempt authAttempt spent, once the token turned
// out valid (or PostgreSQL could not tell): only a refused token counts.
func (l *limits) giveBack(key uint64, now time.Time) {
	if l.failures != nil {
		l.failures.give(key, now)
	}
}

// read spends one read of the principal id, or returns how long to wait
// before the next one.
func (l *limits) read(id string, now time.Time) (time.Duration, bool) {
	if l.reads == nil {
		return 0, true
	}
	return l.reads.take(l.reads.stringKey(id), now)
}

// known is the voter of token when the token cache holds it as valid and
// fresh, else nil. Such a token passes the limit of failed
// authentications without spending from it, so that a valid principal
// behind the same address as a flood of bad tokens (a NAT, a proxy) keeps
// being served: the limit only stands between the flood and PostgreSQL.
func (a *authCache) known(token string, now time.Time) *voter {
	key := ledger.TokenHash(token)
	a.mu.Lock()
	e, hit := a.m[key]
	a.mu.Unlock()
	if hit && e.voter != nil && now.Before(e.expires) {
		return e.voter
	}
	return nil
}

// sweepEvery is how often a keyedLimiter forgets the keys whose bucket is
// full again.
const sweepEvery = 10 * time.Second

// keyedLimiter is a table of token buckets kept in memory, one per key: a
// key may spend burst events at once and rate per second sustained. It
// runs GCRA, as the enqueue script does for votes: a key's state is its
// theoretical arrival time (TAT), and a key whose TAT has passed is full
// and forgotten. It is written out here rather than made of
// golang.org/x/time/rate Limiters for two reasons: a table entry is two
// integers in a map with no pointers (a rate.Limiter is 80 bytes with
// pointers, behind a pointer the collector scans, in a table a flood can
// fill), and an event spent before a lookup can be given back exactly
// once the lookup found a valid token (rate's Reservation.CancelAt
// restores nothing once the reservation's time has passed, and given that
// earlier time it rewinds the limiter's clock).
//
// Keys are 64-bit keyed hashes (maphash with a seed drawn at random for
// this process): the table holds no address or principal in clear, and
// without the seed nobody can choose inputs that collide. The table holds
// at most max keys; beyond it, keys that are full are forgotten first,
// then arbitrary ones (counted by evicted), which lets them start full.
type keyedLimiter struct {
	interval  int64 // nanoseconds per event at the sustained rate
	tolerance int64 // burst × interval: how far past now a TAT may run
	max       int
	seed      maphash.Seed
	epoch     time.Time // times are nanoseconds since epoch, on the monotonic clock
	evicted   prometheus.Counter

	mu        sync.Mutex
	tat       map[uint64]int64 // the TAT of each key not full
	nextSweep int64
}

// newKeyedLimiter returns a limiter of rate events per second with bursts
// of burst, or nil for a rate of +Inf (no limit).
func newKeyedLimiter(rate float64, burst, max int, evicted prometheus.Counter) *keyedLimiter {
	if math.IsInf(rate, 1) {
		return nil
	}
	interval := int64(float64(time.Second) / rate)
	return &keyedLimiter{
		interval: interval, tolerance: int64(burst) * interval, max: max,
		seed: maphash.MakeSeed(), epoch: time.Now(), evicted: evicted,
		tat: map[uint64]int64{}, nextSweep: int64(sweepEvery),
	}
}

// stringKey is the table key of s.
func (l *keyedLimiter) stringKey(s string) uint64 { return maphash.String(l.seed, s) }

// addrKey is the table key of the client address of remoteAddr ("IP:port"):
// its IP, or for IPv6 its /64, since one host commonly holds a whole /64.
// An address that does not parse is keyed as it is written.
func (l *keyedLimiter) addrKey(remoteAddr string) uint64 {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return l.stringKey(host)
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		ip = p.Addr()
	}
	b := ip.As16()
	return maphash.Bytes(l.seed, b[:])
}

// take spends one event of key at now, or returns how long until one is
// allowed.
func (l *keyedLimiter) take(key uint64, now time.Time) (time.Duration, bool) {
	t := int64(now.Sub(l.epoch))
	l.mu.Lock()
	defer l.mu.Unlock()
	if t >= l.nextSweep {
		l.sweep(t)
		l.nextSweep = t + int64(sweepEvery)
	}
	tat, held := l.tat[key]
	if tat < t {
		tat = t
	}
	next := tat + l.interval
	if allowAt := next - l.tolerance; allowAt > t {
		return time.Duration(allowAt - t), false
	}
	if !held && len(l.tat) >= l.max {
		l.makeRoom(t)
	}
	l.tat[key] = next
	return 0, true
}

// give returns one event take spent for key.
func (l *keyedLimiter) give(key uint64, now time.Time) {
	t := int64(now.Sub(l.epoch))
	l.mu.Lock()
	defer l.mu.Unlock()
	tat, held := l.tat[key]
	if !held {
		return
	}
	if tat -= l.interval; tat <= t {
		delete(l.tat, key)
		return
	}
	l.tat[key] = tat
}

// sweep forgets the keys that are full again at t.
func (l *keyedLimiter) sweep(t int64) {
	for k, tat := range l.tat {
		if tat <= t {
			delete(l.tat, k)
		}
	}
}

// makeRoom makes room for a key in a full table: it forgets the keys that
// are full again, and when that is not a tenth of the table, arbitrary
// keys (map order is random) until it is, so that a table kept full by a
// flood of keys is swept once per tenth of its size, not on every take.
func (l *keyedLimiter) makeRoom(t int64) {
	l.sweep(t)
	for k := range l.tat {
		if len(l.tat) < l.max-l.max/10 {
			break
		}
		delete(l.tat, k)
		l.evicted.Inc()
	}
}

// len is the number of keys held.
func (l *keyedLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tat)
}
