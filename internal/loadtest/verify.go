package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"tally/ledger"
	"tally/vote"
)

// Markers of verification.rowCand and verification.ppRow, beside
// candidate and key indexes.
const (
	noRow        = -2 // the key has no ledger row
	notCandidate = -1 // the row's candidate is not a choice of the poll
)

// verification is the state of one Verify.
type verification struct {
	rowCand   []int16             // by key: the ballot (index) of its ledger row, noRow or notCandidate
	ppRow     []int64             // by first response of a principal and poll: the key recorded for them (answers latest: the last in the log), or -1
	ppRows    map[uint32][]uint32 // answers latest: by first response, the keys recorded, in log order
	rejected  map[string]int64
	recLatUS  []uint32
	anomalies anomalies

	recorded, lost, countedTwice, reordered, wrongPayload int64
}

// Verify reads the session's polls from the ledger and checks them against
// the ground truth (see the package documentation). It changes nothing and
// may be called again. An error means the ledger could not be read; a
// broken invariant is in Report.Failures.
func (s *Session) Verify(ctx context.Context) (Report, error) {
	s.phase.Store("verifying")
	t := s.truth
	t.mu.Lock()
	defer t.mu.Unlock()
	rounds := s.roundsCreated()
	v := newVerification(len(t.keys))
	// 1. Every ledger row of the polls must be one accepted (or uncertain)
	// key, with its payload, once per key and once per principal and poll.
	if err := s.checkRows(ctx, v, rounds); err != nil {
		return Report{}, err
	}
	// 1b. Answers latest: the ballots of each principal are in the log in
	// the order they were sent, and each but the last reads superseded.
	if err := s.checkLatest(ctx, v); err != nil {
		return Report{}, err
	}
	// 2. Every accepted key without a ledger row must be rejected, for the
	// reason its kind expects; without a record it is lost.
	if err := s.checkUnrecorded(ctx, v); err != nil {
		return Report{}, err
	}
	// 3. The projection equals the ground truth, and rebuild equals the
	// projection.
	tallyDiffs, rebuildDiffs, err := s.checkTallies(ctx, v, rounds)
	if err != nil {
		return Report{}, err
	}
	return s.report(v, rounds, tallyDiffs, rebuildDiffs), nil
}

func newVerification(keys int) *verification {
	v := &verification{rowCand: make([]int16, keys), ppRow: make([]int64, keys), ppRows: map[uint32][]uint32{}, rejected: map[string]int64{}}
	for i := range keys {
		v.rowCand[i], v.ppRow[i] = noRow, -1
	}
	return v
}

// checkRows reads the ledger rows of the session's polls and checks each
// (checkRow).
func (s *Session) checkRows(ctx context.Context, v *verification, rounds int) error {
	byID := make(map[string]int32, len(s.principals))
	for i, p := range s.principals {
		byID[p.id] = int32(i)
	}
	for r := range rounds {
		poll := s.pollID(r)
		err := s.store.Export(ctx, poll, func(row ledger.LedgerRow) error {
			if row.Definition == nil {
				s.checkRow(v, int32(r), byID, row)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("loadtest verify: read the ledger of %s: %w", poll, err)
		}
	}
	return nil
}

// checkTallies compares, poll by poll, the projection with the ground
// truth (every figure of its kind: ledger.ResultsOf of the ballots that
// count) and rebuild with the projection, and returns the differences.
func (s *Session) checkTallies(ctx context.Context, v *verification, rounds int) (tallyDiffs, rebuildDiffs []string, err error) {
	expected := s.expectedTallies(v, rounds)
	for r := range rounds {
		poll := s.pollID(r)
		res, err := s.store.Results(ctx, poll)
		if err != nil {
			return nil, nil, fmt.Errorf("loadtest verify: read the results of %s: %w", poll, err)
		}
		want := ledger.ResultsOf(poll, s.ballots.count(expected[r]))
		want.AsOf, want.TreeSize = res.AsOf, res.TreeSize
		got, _ := json.Marshal(res)
		exp, _ := json.Marshal(want)
		if !bytes.Equal(got, exp) {
			tallyDiffs = append(tallyDiffs, fmt.Sprintf("%s: projection %s, ground truth %s", poll, got, exp))
		}
		rep, err := s.store.Rebuild(ctx, poll)
		if err != nil {
			return nil, nil, fmt.Errorf("loadtest verify: rebuild %s: %w", poll, err)
		}
		for _, d := range rep.Diffs() {
			rebuildDiffs = append(rebuildDiffs, fmt.Sprintf("%s %s %s: ledger %d, projection %d", d.PollID, d.CandidateID, d.Figure, d.Ledger, d.Projection))
		}
	}
	return tallyDiffs, rebuildDiffs, nil
}

// checkRow checks one ledger row of round r's poll.
func (s *Session) checkRow(v *verification, r int32, byID map[string]int32, row ledger.LedgerRow) {
	t := s.truth
	idx, ok := parseKeyID(row.ClientEventID)
	p, okP := byID[row.PrincipalID]
	if !ok || !okP || int(idx) >= len(t.keys) || t.keys[idx].principal != p || t.keys[idx].round != r {
		v.countedTwice++
		v.anomalies.add("counted twice: a ledger row of a loadtest poll that no vote of the loadtest accounts for",
			"seq %d: principal %s, key %q, candidate %s", row.Seq, row.PrincipalID, row.ClientEventID, row.CandidateID)
		return
	}
	k := &t.keys[idx]
	if v.rowCand[idx] != noRow {
		v.countedTwice++
		v.anomalies.add("counted twice: a second ledger row for one key (I2)", "seq %d: %s", row.Seq, row.ClientEventID)
		return
	}
	answer := row.Event().Answer()
	c, okC := s.ballots.index[answer]
	cand := int16(notCandidate)
	if okC {
		cand = int16(c)
	}
	v.rowCand[idx] = cand
	switch k.status {
	case keyRefused:
		v.countedTwice++
		v.anomalies.add("counted twice: a ledger row for a vote intake refused", "%s: refused, yet recorded with seq %d", keyID(idx), row.Seq)
		return
	case keyAccepted:
		v.recLatUS = append(v.recLatUS, uint32(min(max(row.RecordedAt.UnixNano()-k.acceptedAt, 0)/1000, 1<<32-1)))
	}
	if !okC || (cand != int16(k.candidate) && cand != k.altCand) {
		v.wrongPayload++
		v.anomalies.add("a ledger row with a payload the key was never accepted with", "%s sent with %s, recorded with %s",
			keyID(idx), s.ballots.list[k.candidate], answer)
	}
	if s.cfg.Answers == vote.AnswersLatest {
		v.ppRows[k.first] = append(v.ppRows[k.first], idx)
		v.ppRow[k.first] = int64(idx)
		v.recorded++
		return
	}
	if other := v.ppRow[k.first]; other >= 0 {
		v.countedTwice++
		v.anomalies.add("counted twice: a second ledger row for one principal in one poll (I2)",
			"%s and %s of principal %s in %s", keyID(uint32(other)), keyID(idx), row.PrincipalID, row.PollID)
		return
	}
	v.ppRow[k.first] = int64(idx)
	v.recorded++
}

// checkLatest checks, in a poll of answers latest, each principal's
// ballots in the log: no ballot sent after another was answered 202 comes
// before it (unless AllowReorder), and each but the last reads superseded,
// by the last, which reads recorded.
func (s *Session) checkLatest(ctx context.Context, v *verification) error {
	t := s.truth
	var keys []ledger.EventKey
	for _, rows := range v.ppRows {
		for a, ka := range rows {
			for _, kb := range rows[a+1:] {
				if acc := t.keys[kb].acceptedAt; !s.cfg.AllowReorder && acc != 0 && t.keys[ka].plannedAt > acc {
					v.reordered++
					v.anomalies.add("reordered: a ballot sent after another was answered 202 is before it in the poll's log",
						"%s before %s in %s", keyID(ka), keyID(kb), s.pollID(int(t.keys[ka].round)))
				}
			}
		}
		for _, k := range rows {
			keys = append(keys, ledger.EventKey{PrincipalID: s.principals[t.keys[k].principal].id, ClientEventID: keyID(k)})
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		recs, err := s.store.Events(ctx, keys[:n])
		if err != nil {
			return fmt.Errorf("loadtest verify: read the ballots' statuses: %w", err)
		}
		for _, k := range keys[:n] {
			idx, _ := parseKeyID(k.ClientEventID)
			last := v.ppRow[t.keys[idx].first]
			want, by := ledger.StatusSuperseded, keyID(uint32(last))
			if int64(idx) == last {
				want, by = ledger.StatusRecorded, ""
			}
			if r := recs[k]; r.Status != want || r.SupersededBy != by {
				v.anomalies.add("a ballot of a poll of answers latest reads another status than its place in the log says",
					"%s reads %s %q, want %s %q", k.ClientEventID, r.Status, r.SupersededBy, want, by)
			}
		}
		keys = keys[n:]
	}
	return nil
}

// checkUnrecorded looks up, in the ledger, every key answered 202 (or
// uncertain) that has no ledger row, and judges what it finds
// (judgeUnrecorded).
func (s *Session) checkUnrecorded(ctx context.Context, v *verification) error {
	t := s.truth
	var todo []uint32
	for i := range t.keys {
		st := t.keys[i].status
		if (st == keyAccepted || st == keyUncertain) && v.rowCand[i] == noRow {
			todo = append(todo, uint32(i))
		}
	}
	found, err := s.lookUpEvents(ctx, todo)
	if err != nil {
		return err
	}
	for j, i := range todo {
		if err := s.judgeUnrecorded(v, i, found[j]); err != nil {
			return err
		}
	}
	return nil
}

// lookup is what the ledger holds of one key.
type lookup struct {
	rec ledger.EventRecord
	err error
}

// lookUpEvents reads the ledger's record of each key, eight at a time.
func (s *Session) lookUpEvents(ctx context.Context, keys []uint32) ([]lookup, error) {
	t := s.truth
	found := make([]lookup, len(keys))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(8, len(keys)) {
		wg.Go(func() {
			for {
				j := int(next.Add(1) - 1)
				if j >= len(keys) || ctx.Err() != nil {
					return
				}
				k := t.keys[keys[j]]
				rec, err := s.store.Event(ctx, s.principals[k.principal].id, keyID(keys[j]))
				found[j] = lookup{rec, err}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("loadtest verify: %w", err)
	}
	return found, nil
}

// judgeUnrecorded judges key i, which has no ledger row, by what the
// ledger holds of it: nothing (lost, when it was accepted), or a
// rejection whose reason its kind must explain.
func (s *Session) judgeUnrecorded(v *verification, i uint32, found lookup) error {
	t := s.truth
	k := &t.keys[i]
	switch {
	case errors.Is(found.err, ledger.ErrNotFound):
		if k.status == keyAccepted {
			v.lost++
			v.anomalies.add("lost: answered 202, yet neither recorded nor rejected (I1)", "%s (%s) of principal %s in %s",
				keyID(i), k.kind, s.principals[k.principal].id, s.pollID(int(k.round)))
		}
		return nil
	case found.err != nil:
		return fmt.Errorf("loadtest verify: look up %s: %w", keyID(i), found.err)
	case found.rec.Status != ledger.StatusRejected:
		v.anomalies.add("recorded after the queue drained (the verification raced the projector)", "%s", keyID(i))
		return nil
	}
	reason := found.rec.Reason
	v.rejected[string(reason)]++
	winner := v.ppRow[k.first]
	switch {
	case reason == ledger.ReasonAlreadyResponded && winner >= 0 && winner != int64(i):
		if k.kind == kindFirst && k.status == keyAccepted && t.keys[winner].status == keyAccepted {
			v.reordered++
			if !s.cfg.AllowReorder {
				v.anomalies.add("reordered: the ledger counted a later response of a principal instead of the first accepted one",
					"%s rejected already_responded, %s recorded", keyID(i), keyID(uint32(winner)))
			}
		}
	case k.status == keyUncertain:
		// Its fate was never known; any record of it is fine.
	default:
		v.anomalies.add("rejected for a reason the vote does not explain", "%s (%s) rejected %s", keyID(i), k.kind, reason)
	}
	return nil
}

// expectedTallies is the ground truth: for each poll, the ballots (by
// index) that count: for each principal, the ballot of its first response
// accepted (answers latest: of its last ballot in the log, which
// checkLatest held to the order the ballots were sent in). A principal whose only
// response is uncertain counts when the ledger recorded it. With
// AllowReorder, a later accepted response the ledger recorded counts
// instead of the first.
func (s *Session) expectedTallies(v *verification, rounds int) [][]int {
	t := s.truth
	out := make([][]int, rounds)
	for i := range t.keys {
		k := &t.keys[i]
		if k.kind != kindFirst || int(k.round) >= rounds {
			continue
		}
		winner := v.ppRow[i]
		cand := -1
		switch {
		case s.cfg.Answers == vote.AnswersLatest:
			if winner >= 0 && v.rowCand[winner] >= 0 {
				cand = int(v.rowCand[winner])
			}
		case k.status == keyAccepted:
			cand = int(k.candidate)
			if winner >= 0 && s.cfg.AllowReorder && winner != int64(i) && t.keys[winner].status == keyAccepted {
				cand = int(t.keys[winner].candidate)
			}
		case winner == int64(i):
			if c := v.rowCand[i]; c >= 0 {
				cand = int(c)
			}
		}
		if cand >= 0 {
			out[k.round] = append(out[k.round], cand)
		}
	}
	return out
}

// percentiles returns the 50th and 99th percentiles and the maximum of
// samples in µs, as durations. It sorts samples.
func percentiles(samples []uint32) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(samples))+0.5) - 1
		i = min(max(i, 0), len(samples)-1)
		return time.Duration(samples[i]) * time.Microsecond
	}
	return Latency{Count: int64(len(samples)), P50: at(0.50), P99: at(0.99), Max: time.Duration(samples[len(samples)-1]) * time.Microsecond}
}
