package intake

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"tally/ledger"
)

// TestPollInfoEligible: an open poll's eligibility list is held as its
// ids, a closed one's as their hashes, and both tell the same principals
// apart; a list poll whose list is empty lets nobody in, an any poll
// everybody. Neither keeps the list of ids read.
func TestPollInfoEligible(t *testing.T) {
	now := time.Now()
	past := now.Add(-time.Minute)
	list := []string{"p-alice", "p-bob", "p-carol"}
	for _, c := range []struct {
		name     string
		p        ledger.Poll
		hashed   bool
		may, not []string
	}{
		{"open list", ledger.Poll{Eligibility: ledger.EligibleList, Eligible: list}, false, list, []string{"p-dave", "p-alic", ""}},
		{"closed list", ledger.Poll{Eligibility: ledger.EligibleList, Eligible: list, ClosesAt: &past}, true, list, []string{"p-dave", "p-alic", ""}},
		{"closed empty list", ledger.Poll{Eligibility: ledger.EligibleList, ClosesAt: &past}, true, nil, []string{"p-alice", ""}},
		{"open empty list", ledger.Poll{Eligibility: ledger.EligibleList}, false, nil, []string{"p-alice", ""}},
		{"any", ledger.Poll{Eligibility: ledger.EligibleAny, ClosesAt: &past}, false, []string{"p-alice", "p-dave"}, nil},
	} {
		c.p.ID, c.p.Choices = "p", []string{"a"}
		pi := newPollInfo(c.p, now)
		if pi.poll.Eligible != nil {
			t.Errorf("%s: the list read is kept beside the set", c.name)
		}
		if hashed := pi.eligible == nil && c.p.Eligibility == ledger.EligibleList; hashed != c.hashed {
			t.Errorf("%s: held as hashes %v, want %v", c.name, hashed, c.hashed)
		}
		for _, id := range c.may {
			if !pi.mayVote(id) {
				t.Errorf("%s: %q may not vote, want it may", c.name, id)
			}
		}
		for _, id := range c.not {
			if pi.mayVote(id) {
				t.Errorf("%s: %q may vote, want it may not", c.name, id)
			}
		}
	}
}

// BenchmarkCatalogMemory reports the heap intake holds per poll (of 3
// choices, no list), per principal of an open and of a closed poll's
// eligibility list, and per revoked principal, as the catalog holds them
// (ids of 26 bytes, as tally's are).
func BenchmarkCatalogMemory(b *testing.B) {
	const polls, listLen, revoked = 10_000, 100_000, 100_000
	id := func(prefix string, i int) string { return fmt.Sprintf("%s-%024x", prefix, i) }
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	now := time.Now()
	past := now.Add(-time.Minute)
	measure := func(n int, build func() any) float64 {
		before := heap()
		keep := build()
		after := heap()
		runtime.KeepAlive(keep)
		return float64(after-before) / float64(n)
	}
	for range b.N {
		perPoll := measure(polls, func() any {
			m := make(map[string]*pollInfo, polls)
			for i := range polls {
				p := ledger.Poll{ID: id("q", i), Title: "What shall we have for lunch?", Choices: []string{"pizza", "sushi", "tacos"},
					Eligibility: ledger.EligibleAny, OpensAt: past}
				m[p.ID] = newPollInfo(p, now)
			}
			return m
		})
		list := func(closes *time.Time) func() any {
			return func() any {
				eligible := make([]string, listLen)
				for i := range eligible {
					eligible[i] = id("p", i)
				}
				return newPollInfo(ledger.Poll{ID: "big", Choices: []string{"a"}, Eligibility: ledger.EligibleList,
					Eligible: eligible, ClosesAt: closes}, now)
			}
		}
		perOpen := measure(listLen, list(nil))
		perClosed := measure(listLen, list(&past))
		perRevoked := measure(revoked, func() any {
			r := &revocations{}
			all := ledger.Revocations{Principals: make(map[string]struct{}, revoked), Keys: map[string]struct{}{}}
			for i := range revoked {
				all.Principals[id("p", i)] = struct{}{}
			}
			r.replace(all)
			return r
		})
		b.ReportMetric(perPoll, "B/poll")
		b.ReportMetric(perOpen, "B/eligible-open")
		b.ReportMetric(perClosed, "B/eligible-closed")
		b.ReportMetric(perRevoked, "B/revoked")
	}
}
