package intake

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/intake/internal/holds"
)

// This file owns intake's limits kept in memory: failed authentications
// per client address, and reads per principal. The first bounds what one
// address may make intake check and log (a signature check, a refusal);
// the second stands between a flood and PostgreSQL, which a read costs a
// query. Votes have their own limit, per principal in Redis (the
// enqueue script), since every intake instance must share it.

// limits are a Server's in-memory limits. A nil limiter is a limit turned
// off (a rate of +Inf).
type limits struct {
	failures *keyedLimiter // failed authentications per client address
	reads    *keyedLimiter // reads per principal

	mu sync.Mutex // orders refused's check and spend of one address
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

// refused charges the allowance of the address of remoteAddr one failed
// authentication. When the allowance is already spent it charges nothing
// and returns how long until it has room again: the request then gets
// 429, so one address cannot make intake log and answer refusals at will.
func (l *limits) refused(remoteAddr string) time.Duration {
	if l.failures == nil {
		return 0
	}
	key := l.failures.addrKey(remoteAddr)
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if room, wait := l.failures.room(key, now); room == 0 {
		return wait
	}
	l.failures.spend(key, now)
	return 0
}

// spent returns how long until the allowance of the address of
// remoteAddr has room again when it is spent, else 0. It charges nothing:
// a signed credential is checked only once it returned 0, so that a flood
// of forged tokens from one address costs no signature check past its
// allowance.
func (l *limits) spent(remoteAddr string) time.Duration {
	if l.failures == nil {
		return 0
	}
	_, wait := l.failures.room(l.failures.addrKey(remoteAddr), time.Now())
	return wait
}

// read spends one read of the principal id, or returns how long to wait
// before the next one.
func (l *limits) read(id string, now time.Time) (time.Duration, bool) {
	if l.reads == nil {
		return 0, true
	}
	return l.reads.take(l.reads.stringKey(id), now)
}

// sweepEvery is how often a keyedLimiter forgets the keys whose bucket is
// full again.
const sweepEvery = 10 * time.Second

// keyedLimiter is a table of token buckets kept in memory, one per key: a
// key may spend burst events at once and rate per second sustained. It
// runs GCRA, as the enqueue script does for votes: a key's state is its
// theoretical arrival time (TAT), and a key whose TAT has passed is full
// and forgotten. It is written out here rather than made of
// golang.org/x/time/rate Limiters because a table entry is two integers
// in a map with no pointers (a rate.Limiter is 80 bytes with pointers,
// behind a pointer the collector scans, in a table a flood can fill).
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

// addrKey is the table key of the client address of remoteAddr (see
// holds.AddrHash).
func (l *keyedLimiter) addrKey(remoteAddr string) uint64 { return holds.AddrHash(l.seed, remoteAddr) }

// take spends one event of key at now, or returns how long until one is
// allowed.
func (l *keyedLimiter) take(key uint64, now time.Time) (time.Duration, bool) {
	t := l.at(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	if n, wait := l.roomAt(key, t); n == 0 {
		return wait, false
	}
	l.spendAt(key, t)
	return 0, true
}

// room is how many events key may spend at now, and when none, how long
// until one is allowed.
func (l *keyedLimiter) room(key uint64, now time.Time) (int, time.Duration) {
	t := l.at(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.roomAt(key, t)
}

// spend spends one event of key at now, even beyond its burst.
func (l *keyedLimiter) spend(key uint64, now time.Time) {
	t := l.at(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spendAt(key, t)
}

// at is now in the limiter's time.
func (l *keyedLimiter) at(now time.Time) int64 { return int64(now.Sub(l.epoch)) }

// roomAt is room at t; l.mu is held.
func (l *keyedLimiter) roomAt(key uint64, t int64) (int, time.Duration) {
	// An event is allowed while tat + interval - tolerance <= t.
	tat := max(l.tat[key], t)
	if n := (t + l.tolerance - tat) / l.interval; n > 0 {
		return int(n), 0
	}
	return 0, time.Duration(tat + l.interval - l.tolerance - t)
}

// spendAt is spend at t; l.mu is held.
func (l *keyedLimiter) spendAt(key uint64, t int64) {
	if t >= l.nextSweep {
		l.sweep(t)
		l.nextSweep = t + int64(sweepEvery)
	}
	tat, held := l.tat[key]
	if !held && len(l.tat) >= l.max {
		l.makeRoom(t)
	}
	l.tat[key] = max(tat, t) + l.interval
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
