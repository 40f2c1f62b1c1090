package intake

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"tally/ledger"
	"tally/stream"
	"tally/vote"
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
		if hashed := pi.list != nil && pi.list.closed; hashed != c.hashed {
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

// TestIDSet: the set holds each id given, once, and nothing else: not
// an id that is a prefix of one held or has one as its prefix, not the
// empty id, not what lies between two ids packed end to end.
func TestIDSet(t *testing.T) {
	ids := []string{"p-b", "p-a", "p-ab", "p-b", "q", "p-abc"}
	s := newIDSet(ids)
	if ids[0] != "p-b" || ids[1] != "p-a" {
		t.Fatalf("newIDSet changed its argument: %q", ids)
	}
	if s.len() != 5 {
		t.Fatalf("%d ids held, want 5 (one of the two p-b)", s.len())
	}
	for i := 1; i < s.len(); i++ {
		if s.at(i-1) >= s.at(i) {
			t.Fatalf("ids held out of order: %q before %q", s.at(i-1), s.at(i))
		}
	}
	for _, id := range ids {
		if !s.has(id) {
			t.Errorf("%q is not in the set, want it is", id)
		}
	}
	for _, id := range []string{"", "p", "p-", "p-abcd", "p-aa", "p-c", "p-bq", "a", "r", "bp-a", "p-ap-ab"} {
		if s.has(id) {
			t.Errorf("%q is in the set, want it is not", id)
		}
	}
	var empty idSet
	if newIDSet(nil).has("") || empty.has("p-a") {
		t.Error("an empty set has an id")
	}
	one := newIDSet([]string{"p-a"})
	if !one.has("p-a") || one.has("p-b") || one.has("p-") {
		t.Error("a set of one id answers wrong")
	}
}

// TestPollInfoChoices: a single-choice poll finds each of its choices
// with its enqueue arguments, whatever their order, and nothing else; a
// poll of another kind makes its ballots' arguments per vote.
func TestPollInfoChoices(t *testing.T) {
	choices := []string{"tacos", "pizza", "sushi", "pi", "pizzas"}
	pi := newPollInfo(ledger.Poll{ID: "lunch", Title: "What shall we have?", Choices: choices}, time.Now())
	if !slices.Equal(pi.poll.Choices, choices) {
		t.Errorf("choices %q, want %q in display order", pi.poll.Choices, choices)
	}
	for _, c := range choices {
		got := pi.choice([]byte(c))
		if got == nil || got.answer != c || got.recordArg != stream.Record("lunch", c) {
			t.Errorf("choice %q: %+v, want its answer and record", c, got)
		}
	}
	for _, c := range []string{"", "p", "pizz", "pizzass", "z", "a"} {
		if got := pi.choice([]byte(c)); got != nil {
			t.Errorf("choice %q found: %+v, want nil", c, got)
		}
	}
	r, err := vote.NewRules(vote.Spec{Kind: string(vote.KindRanked)}, len(choices))
	if err != nil {
		t.Fatal(err)
	}
	ranked := newPollInfo(ledger.Poll{ID: "lunch", Choices: choices, Rules: r}, time.Now())
	if ranked.choices != nil || ranked.choice([]byte("pizza")) != nil {
		t.Error("a ranked poll holds single choices' arguments")
	}
}

// BenchmarkCatalogMemory reports the heap intake holds per poll (of 3
// choices, a title of 40 bytes, no list), per principal of an open and of a closed poll's
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
				// Each string its own, as a read from PostgreSQL makes them.
				p := ledger.Poll{ID: id("q", i), Title: fmt.Sprintf("What shall we have for lunch on day %d?", i),
					Choices:     []string{strings.Clone("pizza"), strings.Clone("sushi"), strings.Clone("tacos")},
					Eligibility: strings.Clone(ledger.EligibleAny), OpensAt: past}
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
