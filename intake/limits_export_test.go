package intake

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LimitMetrics are a Server's counters of the limits kept in memory.
type LimitMetrics struct {
	AuthLimited prometheus.Counter
	ReadLimited prometheus.Counter
	Evictions   *prometheus.CounterVec // limit
}

func (s *Server) LimitMetrics() LimitMetrics {
	return LimitMetrics{AuthLimited: s.metrics.authLimited, ReadLimited: s.metrics.readLimited, Evictions: s.metrics.limitEvictions}
}

// SweepEvery is how often a limiter forgets the keys that are full again.
const SweepEvery = sweepEvery

// Limiter is a keyedLimiter of client addresses for the tests, read at
// times given as offsets from its creation, so no test waits on a clock.
type Limiter struct{ l *keyedLimiter }

func NewLimiter(rate float64, burst, max int, evicted prometheus.Counter) Limiter {
	return Limiter{newKeyedLimiter(rate, burst, max, evicted)}
}

func (l Limiter) Take(remoteAddr string, at time.Duration) (time.Duration, bool) {
	return l.l.take(l.l.addrKey(remoteAddr), l.l.epoch.Add(at))
}

func (l Limiter) Room(remoteAddr string, at time.Duration) (int, time.Duration) {
	return l.l.room(l.l.addrKey(remoteAddr), l.l.epoch.Add(at))
}

func (l Limiter) Spend(remoteAddr string, at time.Duration) {
	l.l.spend(l.l.addrKey(remoteAddr), l.l.epoch.Add(at))
}

func (l Limiter) Len() int { return l.l.len() }

// Key is the table key of remoteAddr.
func (l Limiter) Key(remoteAddr string) uint64 { return l.l.addrKey(remoteAddr) }
