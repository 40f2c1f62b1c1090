package ledger

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/vote"
)

// BenchmarkAppendLatestCost says what answers latest costs PostgreSQL in
// an append, against single choices of a final poll: batches of 1000 over
// 10 polls of each, appended in turn (5 of each per iteration, so that
// load from elsewhere falls on both alike), each from a connection of its
// own whose backend's CPU it reads. In the latest polls 30% of the events
// are changes, as in the bench's P-latest: in each 10, seven first ballots,
// then the second ballots of two principals and the third of one of them,
// 3,000 events after their first. The pair steps (single×2, latest×2)
// append two batches at once from one Store on two connections, their
// principals split between them as the projector's lanes split them. It
// reports backend CPU (pg-µs/event) and wall time per event of each, and
// latest's backend CPU over single's (latest/single-pg, and
// latest/single-pg×2 for the pairs).
func BenchmarkAppendLatestCost(b *testing.B) {
	ctx := context.Background()
	db := testenv.Postgres(b)
	choices := []string{"a", "b", "c", "d"}
	single, latest := newCostConn(ctx, b, db.URL, 1), newCostConn(ctx, b, db.URL, 1)
	single2, latest2 := newCostConn(ctx, b, db.URL, 2), newCostConn(ctx, b, db.URL, 2)
	rules, err := vote.NewRules(vote.Spec{Answers: "latest"}, len(choices))
	if err != nil {
		b.Fatal(err)
	}
	// Each step has polls of its own: a Store that finds a poll's log grown
	// by another's appends reads more (voters.go).
	for p := range 10 {
		for _, id := range []string{"single", "single2-"} {
			if err := single.store.CreatePoll(ctx, Poll{ID: id + strconv.Itoa(p), Title: "cost", OpensAt: time.Unix(0, 0), Choices: choices}); err != nil {
				b.Fatal(err)
			}
		}
		for _, id := range []string{"latest", "latest2-"} {
			if err := single.store.CreatePoll(ctx, Poll{ID: id + strconv.Itoa(p), Title: "cost", OpensAt: time.Unix(0, 0), Choices: choices, Rules: rules}); err != nil {
				b.Fatal(err)
			}
		}
	}
	singles := func(poll, prefix string, n *int, size int) []Event {
		now := time.Now()
		evs := make([]Event, size)
		for j := range evs {
			*n++
			evs[j] = Event{PrincipalID: prefix + strconv.Itoa(*n), ClientEventID: "k1", PollID: poll + strconv.Itoa(*n%10),
				CandidateID: choices[(*n/10)%len(choices)], ReceivedAt: now}
		}
		return evs
	}
	latests := func(poll, prefix string, n *int, size int) []Event {
		now := time.Now()
		evs := make([]Event, size)
		for j := range evs {
			p, nth := latestChange(*n)
			*n++
			evs[j] = Event{PrincipalID: prefix + strconv.Itoa(p), ClientEventID: "k" + strconv.Itoa(nth), PollID: poll + strconv.Itoa(p%10),
				CandidateID: choices[(p+nth)%len(choices)], ReceivedAt: now}
		}
		return evs
	}
	var ns, nl, ns2, nl2 int
	steps := []struct {
		name    string
		conn    *costConn
		batches func() [][]Event
	}{
		{"single", single, func() [][]Event { return [][]Event{singles("single", "u", &ns, 1000)} }},
		{"latest", latest, func() [][]Event { return [][]Event{latests("latest", "v", &nl, 1000)} }},
		{"single×2", single2, func() [][]Event { return byLane(singles("single2-", "w", &ns2, 2000)) }},
		{"latest×2", latest2, func() [][]Event { return byLane(latests("latest2-", "x", &nl2, 2000)) }},
	}
	cpu := make([]float64, len(steps))
	wall := make([]time.Duration, len(steps))
	events := make([]int, len(steps))
	b.ResetTimer()
	for range b.N {
		for i, s := range steps {
			c0, t0 := s.conn.cpu(), time.Now()
			for range 5 {
				n, err := appendAtOnce(ctx, s.conn.store, s.batches())
				if err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
				events[i] += n
			}
			cpu[i] += s.conn.cpu() - c0
			wall[i] += time.Since(t0)
		}
	}
	for i, s := range steps {
		b.ReportMetric(1e6*cpu[i]/float64(events[i]), s.name+"-pg-µs/event")
		b.ReportMetric(float64(wall[i].Microseconds())/float64(events[i]), s.name+"-wall-µs/event")
	}
	if cpu[0] > 0 && cpu[2] > 0 {
		b.ReportMetric(cpu[1]/cpu[0], "latest/single-pg")
		b.ReportMetric(cpu[3]/cpu[2], "latest/single-pg×2")
	}
}

// byLane splits events in two by principal, in order, as the projector's
// two lanes would.
func byLane(events []Event) [][]Event {
	lanes := make([][]Event, 2)
	for _, e := range events {
		k := e.PrincipalID[len(e.PrincipalID)-1] % 2
		lanes[k] = append(lanes[k], e)
	}
	return lanes
}

// appendAtOnce appends each of batches from a goroutine of its own, at
// once, and returns how many events they recorded: every one, or an
// error.
func appendAtOnce(ctx context.Context, store *Store, batches [][]Event) (int, error) {
	errs := make(chan error, len(batches))
	for _, batch := range batches {
		go func() {
			outs, err := store.Append(ctx, batch)
			for k, o := range outs {
				if err == nil && o.Status != StatusRecorded {
					err = fmt.Errorf("event %d: %s, want recorded", k, o)
				}
			}
			errs <- err
		}()
	}
	n := 0
	var first error
	for _, batch := range batches {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
		n += len(batch)
	}
	return n, first
}

// latestChange is whose ballot event i of BenchmarkAppendLatestCost's
// latest polls is, and the how-manieth of its principal (bench/kinds.go's
// changeOf): in each block b of 10 events, the first 7 are the first
// ballots of principals 7b to 7b+6, then the second ballots of
// principals 7c and 7c+1 and the third of 7c, c being 300 blocks before
// b (in the first 300 blocks, the block's own 7b+2 and 7b+3).
func latestChange(i int) (principal, nth int) {
	b, s := i/10, i%10
	if s < 7 {
		return 7*b + s, 1
	}
	p := 7*b + 2
	if b >= 300 {
		p = 7 * (b - 300)
	}
	switch s {
	case 7:
		return p, 2
	case 8:
		return p + 1, 2
	}
	return p, 3
}
