package intake

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// This file owns intake's own backlog as it reports it: the votes it holds
// that Redis has not answered yet (tally_intake_held_votes), the length of
// each shard's stream as its last readiness check read it
// (tally_intake_stream_entries), and the level at which /readyz's backlog
// check warns before votes are refused.

// backlogHighShare is the share of Config.MaxBacklog at which /readyz's
// backlog check reads backlog_high: votes are still taken, but the
// projector is falling behind and they will be refused at the bound.
const backlogHighShare = 0.8

// held is the number of votes the batcher holds that Redis has not
// answered yet: waiting for a pipeline, or in one under way.
func (b *batcher) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.pending)
	for _, batch := range b.flying {
		for _, c := range batch {
			if !c.answered.Load() {
				n++
			}
		}
	}
	return n
}

// newBacklogMetrics makes the gauges of intake's own backlog: held reads
// the votes the batcher of m.heldBy holds when scraped (none before it is
// set); the streams' entries are set by each readiness check.
func (m *metrics) newBacklogMetrics() []prometheus.Collector {
	m.streamEntries = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tally", Subsystem: "intake", Name: "stream_entries",
		Help: "Entries in each stream shard (the backlog the projectors have not applied yet, which --max-backlog bounds), " +
			"as intake's last /readyz check read them (XLEN); a check runs at most once per --read-cache-ttl.",
	}, []string{"shard"})
	m.heldVotes = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "tally", Subsystem: "intake", Name: "held_votes",
		Help: "Votes intake holds that Redis has not answered yet: waiting for a pipeline, or in one under way. " +
			"None is answered 202 before Redis holds it; a vote still held at its deadline is answered 503.",
	}, func() float64 {
		if b := m.heldBy.Load(); b != nil {
			return float64(b.held())
		}
		return 0
	})
	return []prometheus.Collector{m.streamEntries, m.heldVotes}
}

// observeStreams sets the gauge of each shard's entries and returns the
// longest shard's.
func (m *metrics) observeStreams(lens []int64) (longest int64) {
	for i, n := range lens {
		m.streamEntries.WithLabelValues(strconv.Itoa(i)).Set(float64(n))
		longest = max(longest, n)
	}
	return longest
}
