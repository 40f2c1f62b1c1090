package main

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// This file owns what the live viewers' events add up to: latencies from
// a vote's 202 to an event that counts it, gaps between events, updates
// per viewer, and their quantiles (viewerStats).

// viewerStats gathers the viewers' latencies, gaps and update counts
// over the watched rounds.
type viewerStats struct {
	lat, gaps []time.Duration
	updates   []int
}

// add adds the figures of the viewers vs of the watched phase ph, from
// their events and its 202s. A viewer that got no update, or missed a
// count, fails it.
func (st *viewerStats) add(vs *viewers, ph livePhase) error {
	acc := ph.accepted
	end := ph.start.Add(ph.took)
	// At most about 100 votes per viewer are followed: enough for the
	// quantiles, and cheap.
	step := max(1, len(acc)/100)
	for _, v := range vs.all {
		if len(v.events) < 2 {
			return errors.New("a live viewer got no update while the votes flowed")
		}
		st.updates = append(st.updates, len(v.events)-1)
		for i := 1; i < len(v.events); i++ {
			if a, b := v.events[i-1].at, v.events[i].at; !a.Before(ph.start) && !b.After(end) {
				st.gaps = append(st.gaps, b.Sub(a))
			}
		}
		j := 0
		for k := step; k <= len(acc); k += step {
			for j < len(v.events) && (v.events[j].total < int64(k) || v.events[j].at.Before(acc[k-1])) {
				j++
			}
			if j == len(v.events) {
				return fmt.Errorf("a live viewer never saw a total of %d", k)
			}
			st.lat = append(st.lat, v.events[j].at.Sub(acc[k-1]))
		}
	}
	return nil
}

// finish sets r's viewer figures.
func (st *viewerStats) finish(r *liveResult) error {
	if len(st.updates) == 0 {
		return errors.New("no live viewer was measured")
	}
	slices.Sort(st.updates)
	r.updatesMin, r.updatesMedian = st.updates[0], st.updates[len(st.updates)/2]
	r.latency50, r.latency99 = quantile(st.lat, 0.5), quantile(st.lat, 0.99)
	r.gap50, r.gap99 = quantile(st.gaps, 0.5), quantile(st.gaps, 0.99)
	return nil
}

// quantile is the q-quantile of ds, which it sorts; 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}
