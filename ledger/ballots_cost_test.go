package ledger

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"tally/vote"
)

// BenchmarkBallotWork is the Go side of an append that a ballot's kind
// changes, without a database, per batch of 1000 events over 10 polls of
// 4 choices (the bench's P rows): each event validated (validateEvent),
// fingerprinted, its ballot read and checked (readBallots), counted into
// its poll's figures (figureRows), and its log leaf hashed (leafHash).
// Run it with -cpu 1: its cpu-ns/event is the process's.
func BenchmarkBallotWork(b *testing.B) {
	maxScore := 5
	for _, k := range []struct {
		name    string
		spec    vote.Spec
		ballots []string
	}{
		{"single", vote.Spec{}, []string{"a", "b", "c", "d"}},
		{"score", vote.Spec{Kind: "score", MaxScore: &maxScore},
			[]string{`{"a":0,"b":1,"c":2,"d":3}`, `{"a":1,"b":2,"c":3,"d":4}`, `{"a":2,"b":3,"c":4,"d":5}`, `{"a":5,"b":0,"c":1,"d":2}`}},
		{"ranked", vote.Spec{Kind: "ranked"}, []string{`["a","b","c","d"]`, `["c","a","d","b"]`, `["d","c","b","a"]`, `["b","d","a","c"]`}},
	} {
		b.Run("kind="+k.name, func(b *testing.B) {
			r, err := vote.NewRules(k.spec, 4)
			if err != nil {
				b.Fatal(err)
			}
			const polls, size = 10, 1000
			rules := map[string]*pollRules{}
			for p := range polls {
				rules[fmt.Sprintf("poll%d", p)] = &pollRules{rules: r, choices: []string{"a", "b", "c", "d"}}
			}
			events := make([]Event, size)
			now := time.Now()
			for i := range events {
				events[i] = EventOf(fmt.Sprintf("u%d", i), "k1", fmt.Sprintf("poll%d", i%polls), k.ballots[(i/polls)%len(k.ballots)], now)
			}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				for i, e := range events {
					if err := validateEvent(i, e); err != nil {
						b.Fatal(err)
					}
				}
				_ = fingerprints(events)
				ok, ballots := readBallots(events, rules)
				counts := map[string]*vote.Count{}
				for i, e := range events {
					if !ok[i] {
						continue
					}
					c := counts[e.PollID]
					if c == nil {
						c = vote.NewCount(r.Kind, rules[e.PollID].choices)
						counts[e.PollID] = c
					}
					c.Add(ballots[i], 1)
				}
				var f figureRows
				for p, c := range counts {
					f.add(p, c)
				}
				for _, e := range events {
					if _, err := leafHash(e); err != nil {
						b.Fatal(err)
					}
				}
			}
			// CPU time, not the elapsed: the machines these run on are shared.
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N*size), "cpu-ns/event")
		})
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
