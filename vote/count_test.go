package vote

import (
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

func mustParse(t *testing.T, k Kind, s string) Ballot {
	t.Helper()
	b, err := ParseBallot(k, []byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Each kind's figures, worked by hand.
func TestCountByHand(t *testing.T) {
	choices := []string{"a", "b", "c", "d"}

	m := NewCount(KindMultiple, choices)
	for _, s := range []string{`["a","c"]`, `["c"]`, `[]`} {
		m.Add(mustParse(t, KindMultiple, s), 1)
	}
	if m.Ballots != 3 || m.Figures[0].Votes != 1 || m.Figures[2].Votes != 2 || m.Total() != 3 {
		t.Errorf("multiple: %+v", m)
	}

	a := NewCount(KindApprove, choices)
	a.Add(mustParse(t, KindApprove, `{"a":"yes","b":"no","c":"abstain"}`), 1)
	a.Add(mustParse(t, KindApprove, `{"a":"no"}`), 1)
	if f := a.Figures[0]; f != (Figures{Votes: 1, Yes: 1, No: 1}) {
		t.Errorf("approve a: %+v", f)
	}
	if f := a.Figures[2]; f != (Figures{Abstain: 1}) {
		t.Errorf("approve c: %+v", f)
	}

	s := NewCount(KindScore, choices)
	s.Add(mustParse(t, KindScore, `{"a":3,"b":0}`), 1)
	s.Add(mustParse(t, KindScore, `{"a":5}`), 1)
	if s.Figures[0] != (Figures{Votes: 2, Score: 8}) || s.Figures[1] != (Figures{Votes: 1}) || s.Figures[3] != (Figures{}) {
		t.Errorf("score: %+v", s.Figures)
	}

	// Three ballots over a, b, c, d: c>a>b (d unranked), a>c, b.
	r := NewCount(KindRanked, choices)
	for _, b := range []string{`["c","a","b"]`, `["a","c"]`, `["b"]`} {
		r.Add(mustParse(t, KindRanked, b), 1)
	}
	// Borda (n=4): c 3+2, a 2+3, b 1+3, d 0.
	for i, want := range []Figures{{Votes: 1, Borda: 5}, {Votes: 1, Borda: 4}, {Votes: 1, Borda: 5}, {}} {
		if r.Figures[i] != want {
			t.Errorf("ranked %s: %+v, want %+v", choices[i], r.Figures[i], want)
		}
	}
	// a above b: ballots 1, 2 (b unranked); b above a: ballot 3 (a unranked).
	for _, tc := range []struct {
		i, j int
		want int64
	}{{0, 1, 2}, {1, 0, 1}, {0, 2, 1}, {2, 0, 1}, {2, 1, 2}, {1, 2, 1}, {0, 3, 2}, {3, 0, 0}, {1, 3, 2}, {2, 3, 2}} {
		if got := r.Beats(tc.i, tc.j); got != tc.want {
			t.Errorf("pairwise[%s][%s] = %d, want %d", choices[tc.i], choices[tc.j], got, tc.want)
		}
	}
	if w, ok := r.CondorcetWinner(); ok {
		t.Errorf("a tie between a and c has Condorcet winner %s", w)
	}
	r.Add(mustParse(t, KindRanked, `["a"]`), 1)
	if w, ok := r.CondorcetWinner(); !ok || w != "a" {
		t.Errorf("Condorcet winner %q, %v; want a", w, ok)
	}
}

// Taking a ballot out undoes adding it, whatever came between; a ranked
// count's pairwise cells of two choices never sum above the ballots.
func TestCountAddThenRemove(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom(Kinds).Draw(t, "kind")
		choices := []string{"a", "b", "c", "d", "e"}
		draw := func() Ballot {
			ids := rapid.SliceOfNDistinct(rapid.SampledFrom(choices), 1, 5, rapid.ID[string]).Draw(t, "ids")
			b := Ballot{Kind: kind, Choices: ids}
			switch kind {
			case KindSingle:
				b.Choices = ids[:1]
			case KindApprove, KindScore:
				b.Choices = nil
				for _, id := range ids {
					b.Marks = append(b.Marks, Mark{Choice: id, Value: rapid.IntRange(0, 2).Draw(t, "v")})
				}
			}
			b.sort()
			return b
		}
		c := NewCount(kind, choices)
		for range rapid.IntRange(0, 20).Draw(t, "before") {
			c.Add(draw(), 1)
		}
		before := *c
		before.Figures = append([]Figures(nil), c.Figures...)
		before.Pairwise = append([]int64(nil), c.Pairwise...)
		x := draw()
		c.Add(x, 1)
		c.Add(x, -1)
		if c.Ballots != before.Ballots {
			t.Fatalf("ballots %d, want %d", c.Ballots, before.Ballots)
		}
		for i := range c.Figures {
			if c.Figures[i] != before.Figures[i] {
				t.Fatalf("figures of %s: %+v, want %+v", choices[i], c.Figures[i], before.Figures[i])
			}
		}
		for i := range c.Pairwise {
			if c.Pairwise[i] != before.Pairwise[i] {
				t.Fatalf("pairwise cell %d: %d, want %d", i, c.Pairwise[i], before.Pairwise[i])
			}
		}
		if kind == KindRanked {
			for i := range choices {
				for j := range choices {
					if i != j && c.Beats(i, j)+c.Beats(j, i) > c.Ballots {
						t.Fatalf("pairwise %d,%d sums above %d ballots", i, j, c.Ballots)
					}
				}
			}
		}
	})
}

// The ledger checks and counts every ballot it appends: neither step
// allocates for a ballot that breaks no rule.
func TestCheckAndAddAllocate(t *testing.T) {
	choices := []string{"a", "b", "c", "d"}
	rules := map[Kind]Rules{
		KindScore:   {Kind: KindScore, MaxScore: 5, Answers: AnswersFinal},
		KindRanked:  {Kind: KindRanked, Answers: AnswersFinal},
		KindApprove: {Kind: KindApprove, Answers: AnswersFinal},
	}
	for _, bb := range benchBallots {
		b, err := ParseCanonical(bb.kind, bb.s)
		if err != nil {
			t.Fatal(err)
		}
		c := NewCount(bb.kind, choices)
		if n := testing.AllocsPerRun(100, func() {
			if err := rules[bb.kind].Check(choices, b); err != nil {
				t.Fatal(err)
			}
			c.Add(b, 1)
		}); n != 0 {
			t.Errorf("%s %s: Check and Add allocate %v times", bb.kind, bb.s, n)
		}
	}
}

// Index finds every choice and no other, whether it searches the
// choices (a small poll) or its map (a large one).
func TestCountIndex(t *testing.T) {
	for _, n := range []int{1, 8, 9, 64} {
		choices := make([]string, n)
		for i := range choices {
			choices[i] = "c" + strconv.Itoa(i)
		}
		c := NewCount(KindScore, choices)
		for i, id := range choices {
			if got := c.Index(id); got != i {
				t.Errorf("%d choices: Index(%q) = %d, want %d", n, id, got, i)
			}
		}
		if got := c.Index("x"); got != -1 {
			t.Errorf("%d choices: Index(%q) = %d, want -1", n, "x", got)
		}
	}
}
