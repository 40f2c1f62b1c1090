package ledger

import (
	"fmt"
	"hash/maphash"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// The filter holds every principal added, across the layers it grows,
// and answers yes for few it does not hold.
func TestPrincipalFilter(t *testing.T) {
	f := principalFilter{seed: maphash.MakeSeed()}
	const n = 50_000 // several layers: bloomFirstCap, four times it, ...
	for i := range n {
		f.add(fmt.Sprintf("p%d", i))
	}
	if len(f.layers) < 3 {
		t.Fatalf("%d layers for %d principals, want several", len(f.layers), n)
	}
	for i := range n {
		if !f.has(fmt.Sprintf("p%d", i)) {
			t.Fatalf("p%d added, not held", i)
		}
	}
	yes := 0
	for i := range n {
		if f.has(fmt.Sprintf("q%d", i)) {
			yes++
		}
	}
	t.Logf("%d layers; %d of %d principals never added read as held", len(f.layers), yes, n)
	// Under 0.1% a full layer.
	if yes > n/100 {
		t.Errorf("%d of %d principals never added read as held", yes, n)
	}
	var empty principalFilter
	if empty.has("p0") {
		t.Error("an empty filter holds p0")
	}
}

// root is a made-up root for the book's tests: the book only compares
// them.
func root(b byte) tlog.Hash { return tlog.Hash{b} }

// The book proves a log's leaves since its base only through spans that
// end where the head is, root included, back to the base; it names the
// principals of the spans it walked; anything else forgets the poll.
func TestVoterBookProve(t *testing.T) {
	newBook := func() (*voterBook, voterBase) {
		var b voterBook
		b.plan([]string{"p"})
		base := b.install("p", 10, root(10), []string{"old"})
		return &b, base
	}
	t.Run("nothing since", func(t *testing.T) {
		b, base := newBook()
		between, ok := b.prove("p", base, 10, root(10))
		if !ok || len(between) != 0 {
			t.Fatalf("prove = %v, %v; want no principals, true", between, ok)
		}
	})
	t.Run("two spans, and one rolled back", func(t *testing.T) {
		b, base := newBook()
		b.note("p", voterSpan{from: 10, to: 12, fromRoot: root(10), toRoot: root(12), principals: []string{"a"}})
		b.note("p", voterSpan{from: 10, to: 12, fromRoot: root(10), toRoot: root(99), principals: []string{"junk"}})
		b.note("p", voterSpan{from: 12, to: 15, fromRoot: root(12), toRoot: root(15), principals: []string{"b", "c"}})
		between, ok := b.prove("p", base, 15, root(15))
		if !ok || len(between) != 3 || !between["a"] || !between["b"] || !between["c"] {
			t.Fatalf("prove = %v, %v; want a, b and c, true", between, ok)
		}
		if got := b.mayHave([]pollPrincipal{{"p", "a"}, {"p", "old"}, {"p", "junk"}}); !got[0] || !got[1] || !got[2] {
			t.Fatalf("mayHave a, old, junk = %v: every principal noted is in the filter", got)
		}
		b.advance("p", base.epoch, 15, root(15))
		again, _ := b.plan([]string{"p"})
		if again["p"].size != 15 || again["p"].root != root(15) {
			t.Fatalf("base after advance %+v, want size 15", again["p"])
		}
	})
	for _, c := range []struct {
		name   string
		at     int64
		atRoot tlog.Hash
	}{
		{"a leaf no span explains", 16, root(16)},
		{"a span's size with another root", 12, root(13)},
		{"the base's size with another root", 10, root(11)},
		{"a smaller log", 9, root(9)},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, base := newBook()
			b.note("p", voterSpan{from: 10, to: 12, fromRoot: root(10), toRoot: root(12), principals: []string{"a"}})
			if between, ok := b.prove("p", base, c.at, c.atRoot); ok {
				t.Fatalf("prove = %v, true; want false", between)
			}
			if bases, load := b.plan([]string{"p"}); len(bases) != 0 || len(load) != 0 {
				t.Fatalf("plan after a failure = %v, %v; want neither (waiting)", bases, load)
			}
			if _, ok := b.prove("p", base, 10, root(10)); ok {
				t.Fatal("a base from before the failure proves a log")
			}
			if got := b.mayHave([]pollPrincipal{{"p", "new"}}); !got[0] {
				t.Fatal("a forgotten poll says a principal has no ballot")
			}
		})
	}
	t.Run("reload after failures, then stop", func(t *testing.T) {
		b, base := newBook()
		for f := range maxVoterFailures {
			if _, ok := b.prove("p", base, 20, root(20)); ok {
				t.Fatal("proved a log no span explains")
			}
			waited := 0
			for {
				bases, load := b.plan([]string{"p"})
				if len(bases) != 0 {
					t.Fatal("a base while waiting")
				}
				if len(load) == 1 {
					break
				}
				if waited++; waited > voterReloadWait<<maxVoterFailures {
					if f == maxVoterFailures-1 {
						return // stopped keeping the poll
					}
					t.Fatalf("no load after %d appends, failure %d", waited, f+1)
				}
			}
			if f == maxVoterFailures-1 {
				t.Fatalf("a load after %d failures", maxVoterFailures)
			}
			if want := voterReloadWait << f; waited != want {
				t.Errorf("load after %d appends, want %d", waited, want)
			}
			base = b.install("p", 20, root(20), nil)
			base.size = 10 // the next prove fails again
		}
	})
}
