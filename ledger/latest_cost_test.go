package ledger

import (
	"context"
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
// 3,000 events after their first. It reports backend CPU (pg-µs/event)
// and wall time per event of each, and latest's backend CPU over
// single's (latest/single-pg).
func BenchmarkAppendLatestCost(b *testing.B) {
	ctx := context.Background()
	db := testenv.Postgres(b)
	choices := []string{"a", "b", "c", "d"}
	single, latest := newCostConn(ctx, b, db.URL, 1), newCostConn(ctx, b, db.URL, 1)
	rules, err := vote.NewRules(vote.Spec{Answers: "latest"}, len(choices))
	if err != nil {
		b.Fatal(err)
	}
	for p := range 10 {
		if err := single.store.CreatePoll(ctx, Poll{ID: "single" + strconv.Itoa(p), Title: "cost", OpensAt: time.Unix(0, 0), Choices: choices}); err != nil {
			b.Fatal(err)
		}
		if err := single.store.CreatePoll(ctx, Poll{ID: "latest" + strconv.Itoa(p), Title: "cost", OpensAt: time.Unix(0, 0), Choices: choices, Rules: rules}); err != nil {
			b.Fatal(err)
		}
	}
	ns, nl := 0, 0
	singles := func() []Event {
		now := time.Now()
		evs := make([]Event, 1000)
		for j := range evs {
			ns++
			evs[j] = Event{PrincipalID: "u" + strconv.Itoa(ns), ClientEventID: "k1", PollID: "single" + strconv.Itoa(ns%10),
				CandidateID: choices[(ns/10)%len(choices)], ReceivedAt: now}
		}
		return evs
	}
	latests := func() []Event {
		now := time.Now()
		evs := make([]Event, 1000)
		for j := range evs {
			p, nth := latestChange(nl)
			nl++
			evs[j] = Event{PrincipalID: "v" + strconv.Itoa(p), ClientEventID: "k" + strconv.Itoa(nth), PollID: "latest" + strconv.Itoa(p%10),
				CandidateID: choices[(p+nth)%len(choices)], ReceivedAt: now}
		}
		return evs
	}
	steps := []struct {
		name  string
		conn  *costConn
		batch func() []Event
	}{{"single", single, singles}, {"latest", latest, latests}}
	cpu := make([]float64, len(steps))
	wall := make([]time.Duration, len(steps))
	events := make([]int, len(steps))
	b.ResetTimer()
	for range b.N {
		for i, s := range steps {
			c0, t0 := s.conn.cpu(), time.Now()
			for range 5 {
				outs, err := s.conn.store.Append(ctx, s.batch())
				if err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
				for k, o := range outs {
					if o.Status != StatusRecorded {
						b.Fatalf("%s: event %d: %s, want recorded", s.name, k, o)
					}
				}
			}
			cpu[i] += s.conn.cpu() - c0
			wall[i] += time.Since(t0)
			events[i] += 5000
		}
	}
	for i, s := range steps {
		b.ReportMetric(1e6*cpu[i]/float64(events[i]), s.name+"-pg-µs/event")
		b.ReportMetric(float64(wall[i].Microseconds())/float64(events[i]), s.name+"-wall-µs/event")
	}
	if cpu[0] > 0 {
		b.ReportMetric(cpu[1]/cpu[0], "latest/single-pg")
	}
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
