package vote

import "slices"

// This file owns how ballots are counted: what one ballot adds to its
// poll's figures. Every figure is a sum over the ballots that count, so
// the projection adds a ballot's contributions as it records it (and takes
// a replaced ballot's out), and a recount folds them from the ledger.
// (The offline audit has its own copy, on purpose: package audit.)
//
//   - single, multiple: Votes, one per ballot that chose the choice.
//   - approve: Yes, No, Abstain per choice; Votes is Yes.
//   - score: Votes, the ballots that scored the choice; Score, the sum of
//     its scores.
//   - ranked: Votes, the ballots that rank it first; Borda, the sum over
//     ballots of n-1-position (0-based; unranked: 0) for a poll of n
//     choices; and Pairwise[a][b], the ballots that rank a above b, where
//     an unranked choice ranks below every ranked one and two unranked
//     choices are not ordered.
//   - every kind: Ballots, the ballots counted.

// Figures are one choice's figures.
type Figures struct {
	Votes, Yes, No, Abstain, Score, Borda int64
}

// Count is one poll's figures: the sum of what its counted ballots add.
type Count struct {
	Kind     Kind
	Choices  []string // in poll order
	Ballots  int64
	Figures  []Figures // by position in Choices
	Pairwise []int64   // ranked only: Pairwise[i*len(Choices)+j], ballots ranking choice i above choice j
	index    map[string]int
}

// NewCount is the count of no ballot for a poll of kind k with these
// choices.
func NewCount(k Kind, choices []string) *Count {
	c := &Count{Kind: k, Choices: choices, Figures: make([]Figures, len(choices)), index: make(map[string]int, len(choices))}
	for i, id := range choices {
		c.index[id] = i
	}
	if k == KindRanked {
		c.Pairwise = make([]int64, len(choices)*len(choices))
	}
	return c
}

// Index is the position of choice id, or -1 when the poll has none of it.
func (c *Count) Index(id string) int {
	if len(c.Choices) <= 8 { // faster than the map's hash, and Add asks per choice of every ballot
		return slices.Index(c.Choices, id)
	}
	if i, ok := c.index[id]; ok {
		return i
	}
	return -1
}

// Add adds sign (1 to count a ballot, -1 to take a replaced one out) times
// b's contributions. b must be of the poll's kind and pass its Rules.Check;
// a choice the poll does not have is passed over.
func (c *Count) Add(b Ballot, sign int64) {
	c.Ballots += sign
	switch b.Kind {
	case KindSingle, KindMultiple:
		for _, id := range b.Choices {
			if i := c.Index(id); i >= 0 {
				c.Figures[i].Votes += sign
			}
		}
	case KindApprove:
		c.addMarks(b.Marks, sign)
	case KindScore:
		for _, m := range b.Marks {
			if i := c.Index(m.Choice); i >= 0 {
				c.Figures[i].Votes += sign
				c.Figures[i].Score += sign * int64(m.Value)
			}
		}
	case KindRanked:
		c.addRanking(b.Choices, sign)
	}
}

// addMarks adds an approve ballot's marks; a choice left out is unmarked.
func (c *Count) addMarks(marks []Mark, sign int64) {
	for _, m := range marks {
		i := c.Index(m.Choice)
		if i < 0 {
			continue
		}
		f := &c.Figures[i]
		switch m.Value {
		case ApproveYes:
			f.Yes += sign
			f.Votes += sign
		case ApproveNo:
			f.No += sign
		case ApproveAbstain:
			f.Abstain += sign
		}
	}
}

// addRanking adds a ranking: its first preference, every ranked choice's
// Borda points, and a pairwise cell for each ranked choice over every
// choice below it, unranked ones included.
func (c *Count) addRanking(order []string, sign int64) {
	n := len(c.Choices)
	// On the stack for a poll of the kind's size: Add runs per ballot.
	var rankedBuf [MaxRankedChoices]bool
	var posBuf [MaxRankedChoices]int
	var ranked []bool
	pos := posBuf[:0]
	if n <= MaxRankedChoices {
		ranked = rankedBuf[:n]
	} else {
		ranked = make([]bool, n)
	}
	for _, id := range order {
		if i := c.Index(id); i >= 0 && !ranked[i] {
			ranked[i] = true
			pos = append(pos, i)
		}
	}
	for p, i := range pos {
		if p == 0 {
			c.Figures[i].Votes += sign
		}
		c.Figures[i].Borda += sign * int64(n-1-p)
		for _, j := range pos[p+1:] {
			c.Pairwise[i*n+j] += sign
		}
		for j := range n {
			if !ranked[j] {
				c.Pairwise[i*n+j] += sign
			}
		}
	}
}

// Beats reports how many ballots rank choice i above choice j (ranked only).
func (c *Count) Beats(i, j int) int64 { return c.Pairwise[i*len(c.Choices)+j] }

// CondorcetWinner is the choice that more ballots rank above each other
// choice than below it, if there is one (ranked only; a poll of one choice
// has none).
func (c *Count) CondorcetWinner() (string, bool) {
	if c.Kind != KindRanked || len(c.Choices) < 2 {
		return "", false
	}
	for i := range c.Choices {
		wins := true
		for j := range c.Choices {
			if i != j && c.Beats(i, j) <= c.Beats(j, i) {
				wins = false
				break
			}
		}
		if wins {
			return c.Choices[i], true
		}
	}
	return "", false
}

// Total is the sum of every choice's Votes, the figure results report as
// "total".
func (c *Count) Total() int64 {
	var t int64
	for _, f := range c.Figures {
		t += f.Votes
	}
	return t
}
