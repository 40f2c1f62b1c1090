package loadtest

import (
	"encoding/json"
	"fmt"
	"time"
)

// Latency summarizes durations.
type Latency struct {
	Count int64         `json:"count"`
	P50   time.Duration `json:"-"`
	P99   time.Duration `json:"-"`
	Max   time.Duration `json:"-"`
}

// MarshalJSON writes the durations in milliseconds.
func (l Latency) MarshalJSON() ([]byte, error) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return json.Marshal(struct {
		Count int64   `json:"count"`
		P50   float64 `json:"p50_ms"`
		P99   float64 `json:"p99_ms"`
		Max   float64 `json:"max_ms"`
	}{l.Count, ms(l.P50), ms(l.P99), ms(l.Max)})
}

// Report is the outcome of a loadtest.
type Report struct {
	PollPrefix string `json:"poll_prefix"`
	Polls      int    `json:"polls"`
	Principals int    `json:"principals"`

	// Attempted is the votes sent, by kind (first_response,
	// second_response, exact_retry, key_reuse) and in all.
	Attempted       int64            `json:"attempted"`
	AttemptedByKind map[string]int64 `json:"attempted_by_kind"`
	// Requests is the HTTP requests, retries after no answer, 429 or 503
	// included.
	Requests int64 `json:"requests"`
	// Accepted is the votes answered 202, by kind and in all;
	// AcceptedEvents the distinct keys among them, each of which must
	// reach the ledger.
	Accepted       int64            `json:"accepted"`
	AcceptedByKind map[string]int64 `json:"accepted_by_kind"`
	AcceptedEvents int64            `json:"accepted_events"`
	// Refused is the final answer of the votes not answered 202, by
	// status and problem type ("409 key-reused", "no answer").
	Refused map[string]int64 `json:"refused"`
	// Retried is the answers after which a vote was sent again.
	Retried map[string]int64 `json:"retried"`
	// Uncertain is the new keys that never got a definite answer: they may
	// or may not be in the ledger.
	Uncertain int64 `json:"uncertain"`

	// Recorded is the ledger rows of the loadtest's keys.
	Recorded int64 `json:"recorded"`
	// DuplicatesAbsorbed is the 202 answers beyond the first of a key
	// (exact retries, and requests sent again after no answer); the ledger
	// holds one effect for each key whatever their number.
	DuplicatesAbsorbed int64 `json:"duplicates_absorbed"`
	// Rejected is the keys the ledger rejected, by reason.
	Rejected map[string]int64 `json:"rejected"`
	// Lost is the keys answered 202 that are neither recorded nor
	// rejected. Must be 0.
	Lost int64 `json:"lost"`
	// CountedTwice is the ledger rows beyond the ground truth. Must be 0.
	CountedTwice int64 `json:"counted_twice"`
	// Reordered is the principals whose later response the ledger counted
	// instead of the first accepted one.
	Reordered int64 `json:"reordered"`

	// SendDuration is how long sending took; Throughput the votes answered
	// 202 per second of it.
	SendDuration time.Duration `json:"-"`
	Throughput   float64       `json:"throughput_per_second"`
	// AcceptLatency is the round trip of the POSTs answered 202;
	// RecordLatency the time from a key's first 202 to its ledger row's
	// recorded_at (the start of the projector's transaction, so it can be
	// 0).
	AcceptLatency Latency `json:"accept_latency"`
	RecordLatency Latency `json:"accept_to_recorded_latency"`

	// Drained says whether the queue emptied within the drain timeout,
	// and DrainDuration how long the wait took.
	Drained       bool          `json:"drained"`
	DrainDuration time.Duration `json:"-"`
	// DeadLettered is the entries added to the dead-letter streams during
	// the run (by anyone: the streams are shared).
	DeadLettered int64 `json:"dead_lettered"`

	// Verified says whether the ledger was verified; a partial report
	// (sending failed) is not.
	Verified bool `json:"verified"`
	// FailureList is Failures, for JSON.
	FailureList []string `json:"failures"`
}

// Failures lists, in words, every invariant the run broke. It is empty when
// the run passed.
func (r Report) Failures() []string { return r.FailureList }

// Passed reports whether the run was verified and broke nothing.
func (r Report) Passed() bool { return r.Verified && len(r.FailureList) == 0 }

// MarshalJSON adds the durations in seconds.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	return json.Marshal(struct {
		plain
		SendSeconds  float64 `json:"send_seconds"`
		DrainSeconds float64 `json:"drain_seconds"`
	}{plain(r), r.SendDuration.Seconds(), r.DrainDuration.Seconds()})
}

// partialReport reports what was sent, without verification.
func (s *Session) partialReport() Report {
	t := s.truth
	t.mu.Lock()
	defer t.mu.Unlock()
	r := s.sendReport()
	r.FailureList = []string{"the loadtest did not complete: nothing was verified"}
	return r
}

// sendReport fills what the answers say. t.mu is held.
func (s *Session) sendReport() Report {
	t := s.truth
	r := Report{
		PollPrefix:      s.prefix,
		Principals:      len(s.principals),
		AttemptedByKind: map[string]int64{},
		AcceptedByKind:  map[string]int64{},
		Refused:         copyCounts(t.refused),
		Retried:         copyCounts(t.retried),
		Rejected:        map[string]int64{},
		Requests:        s.requests.Load(),
		DrainDuration:   s.drainTime,
		Drained:         s.drained,
	}
	for k := range numKinds {
		r.AttemptedByKind[k.String()] = t.attempted[k]
		r.AcceptedByKind[k.String()] = t.acceptedBy[k]
		r.Attempted += t.attempted[k]
		r.Accepted += t.acceptedBy[k]
	}
	for i := range t.keys {
		switch t.keys[i].status {
		case keyAccepted:
			r.AcceptedEvents++
		case keyUncertain:
			r.Uncertain++
		}
	}
	r.DuplicatesAbsorbed = t.dupAccepts
	if !s.sendEnd.IsZero() {
		r.SendDuration = s.sendEnd.Sub(s.sendStart)
		if secs := r.SendDuration.Seconds(); secs > 0 {
			r.Throughput = float64(r.Accepted) / secs
		}
	}
	r.AcceptLatency = percentiles(t.acceptLatUS)
	if s.queueKnown {
		r.DeadLettered = max(s.deadAfter-s.deadBefore, 0)
	}
	return r
}

// report assembles the report of a verification. t.mu is held.
func (s *Session) report(v *verification, rounds int, tallyDiffs, rebuildDiffs []string) Report {
	r := s.sendReport()
	r.Polls = rounds
	r.Verified = true
	r.Recorded = v.recorded
	r.Rejected = v.rejected
	r.Lost = v.lost
	r.CountedTwice = v.countedTwice
	r.Reordered = v.reordered
	r.RecordLatency = percentiles(v.recLatUS)

	var fs []string
	if !s.drained {
		fs = append(fs, fmt.Sprintf("the queue did not drain within %s: %s", s.cfg.DrainTimeout, s.drainErr))
	}
	fs = append(fs, s.truth.anomalies.messages()...)
	fs = append(fs, v.anomalies.messages()...)
	if n := len(tallyDiffs); n > 0 {
		fs = append(fs, fmt.Sprintf("the tallies differ from the ground truth in %d rows: %s", n, firstFew(tallyDiffs)))
	}
	if n := len(rebuildDiffs); n > 0 {
		fs = append(fs, fmt.Sprintf("rebuild differs from the projection in %d rows (I3): %s", n, firstFew(rebuildDiffs)))
	}
	r.FailureList = fs
	if r.FailureList == nil {
		r.FailureList = []string{}
	}
	return r
}

func firstFew(xs []string) string {
	const n = 5
	s := ""
	for i, x := range xs[:min(n, len(xs))] {
		if i > 0 {
			s += "; "
		}
		s += x
	}
	if len(xs) > n {
		s += fmt.Sprintf("; and %d more", len(xs)-n)
	}
	return s
}

func copyCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
