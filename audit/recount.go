package audit

import (
	"encoding/json"
	"errors"
	"iter"
	"slices"
	"strings"

	"tally/vote"
)

// This file owns the recount (docs/audit.md, "The recount"): which of a
// poll's votes count, and what each adds to the poll's figures. It is the
// audit's own fold, written apart from package vote's Count on purpose
// (the one intended twin of it): the projection and the rebuild count
// with vote, and the audit that checks them must not share their
// mistakes. Its rules:
//
//   - A vote of one choice (candidate_id) counts under its candidate when
//     no definition covers it or the definition in force is of a
//     single-choice poll, offered or not, in the window or not: the
//     discrepancy says what is wrong, the recount what the log holds.
//   - A ballot counts when the definition in force is of its kind and its
//     ballot keeps that definition's rules (ballot.go), in the window or
//     not. One that does not is no figure of any choice: it is left out.
//   - answers final: every vote counted as above (an honest log holds one
//     per principal; a second is a discrepancy, principal_id). answers
//     latest: of a principal's votes that count as above, the last in
//     leaf order among the leaves counted.
//   - Figures per choice: votes (single, multiple: ballots that chose it;
//     approve: yes; score: ballots that scored it; ranked: first
//     preferences), yes/no/abstain (approve), score (score: the sum of its
//     scores), borda (ranked: n-1-position, 0-based, for a poll of n
//     choices; unranked 0); per ranked poll the pairwise matrix, ballots
//     ranking a above b, an unranked choice below every ranked one and
//     two unranked ones not ordered, and the Condorcet winner, the choice
//     that more ballots rank above each other choice than below it; per
//     poll, ballots, the votes counted.

// leafVote is what the recount keeps of one leaf.
type leafVote struct {
	what      leafKind
	latest    bool   // the definition in force takes a principal's latest ballot
	def       int32  // the definition in force, in pollLog.defs; -1: none
	principal uint32 // the voter's code, in pollLog.voters
	code      uint32 // candidate: its code; ballot: its items in pollLog.ballots
}

type leafKind uint8

const (
	leafDefinition leafKind = iota
	leafUncounted           // a vote the recount leaves out
	leafCandidate           // a vote of one choice, counted under its candidate
	leafBallot              // a ballot, counted by its items
)

// code is the code of candidate id c, made when first seen.
func (p *pollLog) code(c string) uint32 {
	code, ok := p.codes[c]
	if !ok {
		code = uint32(len(p.candidates))
		p.codes[c] = code
		p.candidates = append(p.candidates, c)
	}
	return code
}

// addDefinition records d, at leaf index, as the definition in force.
func (p *pollLog) addDefinition(d *Definition, index int64) {
	codes := make([]uint32, len(d.Choices))
	for i, c := range d.Choices {
		codes[i] = p.code(c)
	}
	p.defs, p.defLeaves, p.defCodes = append(p.defs, d), append(p.defLeaves, index), append(p.defCodes, codes)
	p.leaves = append(p.leaves, leafVote{what: leafDefinition, def: -1})
}

// readVote records the vote row, the poll's next leaf, for the recount,
// and says why the definition in force does not take it, with the field
// at fault ("" when it does).
func (p *pollLog) readVote(row ExportRow) (field, why string) {
	lv := leafVote{what: leafUncounted, def: int32(len(p.defs) - 1), principal: p.voters[row.PrincipalID]} // checkRow gave it its code
	defer func() { p.leaves = append(p.leaves, lv) }()
	if p.def == nil {
		if row.Ballot != "" {
			return "ballot", "the vote carries a ballot, but no definition of its poll comes before it to say how to read it; it is not counted"
		}
		lv.what, lv.code = leafCandidate, p.code(row.CandidateID)
		return "", ""
	}
	lv.latest = p.def.BallotRules().Answers == vote.AnswersLatest
	items, ok, field, why := p.def.judge(row.Leaf())
	switch {
	case p.def.BallotRules().Kind == vote.KindSingle && row.Ballot == "":
		lv.what, lv.code = leafCandidate, p.code(row.CandidateID)
	case ok && row.Ballot != "":
		codes := p.defCodes[lv.def]
		coded := make([]ballotItem, len(items))
		for i, it := range items {
			coded[i] = ballotItem{choice: int(codes[it.choice]), value: it.value}
		}
		lv.what, lv.code = leafBallot, uint32(len(p.ballots))
		p.ballots = append(p.ballots, coded)
	}
	return field, why
}

// pollCount is a poll's recount at one size.
type pollCount struct {
	kind      vote.Kind
	ballots   int64
	tallies   []Tally                     // by candidate id
	pairwise  map[string]map[string]int64 // ranked only
	condorcet *Winner                     // ranked only
}

// figures are one candidate's, by code.
type figures struct{ votes, yes, no, abstain, score, borda int64 }

// recount is the count of the first size leaves.
func (p *pollLog) recount(size int64) pollCount {
	c := pollCount{kind: vote.KindSingle}
	var last *Definition
	lastDef := -1
	for i, leaf := range p.defLeaves {
		if leaf < size {
			last, lastDef = p.defs[i], i
		}
	}
	if last != nil {
		c.kind = last.BallotRules().Kind
	}
	figs := make([]figures, len(p.candidates))
	n := len(p.candidates)
	var pw []int64
	if c.kind == vote.KindRanked {
		pw = make([]int64, n*n)
	}
	for i := range p.counted(size) {
		lv := p.leaves[i]
		c.ballots++
		if lv.what == leafCandidate {
			figs[lv.code].votes++
			continue
		}
		p.fold(lv, figs, pw, n)
	}
	if c.kind == vote.KindSingle {
		for code, f := range figs {
			if f.votes > 0 {
				c.tallies = append(c.tallies, Tally{CandidateID: p.candidates[code], Votes: f.votes})
			}
		}
		slices.SortFunc(c.tallies, func(x, y Tally) int { return strings.Compare(x.CandidateID, y.CandidateID) })
		return c
	}
	listed := p.listed(lastDef, figs)
	for _, code := range listed {
		c.tallies = append(c.tallies, kindTally(c.kind, p.candidates[code], figs[code]))
	}
	if c.kind == vote.KindRanked {
		c.pairwise, c.condorcet = p.pairwise(listed, pw, n)
	}
	return c
}

// counted yields the leaves below size whose votes count, in leaf order.
func (p *pollLog) counted(size int64) iter.Seq[int] {
	lastOf := map[uint32]int{}
	for i, lv := range p.leaves[:size] {
		if lv.latest && (lv.what == leafCandidate || lv.what == leafBallot) {
			lastOf[lv.principal] = i
		}
	}
	return func(yield func(int) bool) {
		for i, lv := range p.leaves[:size] {
			if lv.what != leafCandidate && lv.what != leafBallot {
				continue
			}
			if lv.latest && lastOf[lv.principal] != i {
				continue // replaced by the principal's later ballot
			}
			if !yield(i) {
				return
			}
		}
	}
}

// fold adds the ballot of leaf lv to figs and, ranked, to the n-by-n
// pairwise matrix pw, as the kind of the definition in force at its leaf
// counts it.
func (p *pollLog) fold(lv leafVote, figs []figures, pw []int64, n int) {
	def := p.defs[lv.def]
	items := p.ballots[lv.code]
	switch def.BallotRules().Kind {
	case vote.KindMultiple:
		for _, it := range items {
			figs[it.choice].votes++
		}
	case vote.KindApprove:
		for _, it := range items {
			f := &figs[it.choice]
			switch it.value {
			case 0:
				f.yes++
				f.votes++
			case 1:
				f.no++
			case 2:
				f.abstain++
			}
		}
	case vote.KindScore:
		for _, it := range items {
			figs[it.choice].votes++
			figs[it.choice].score += it.value
		}
	case vote.KindRanked:
		choices := p.defCodes[lv.def]
		ranked := map[int]bool{}
		for _, it := range items {
			ranked[it.choice] = true
		}
		for pos, it := range items {
			if pos == 0 {
				figs[it.choice].votes++
			}
			figs[it.choice].borda += int64(len(choices) - 1 - pos)
			if pw == nil {
				continue // the poll's last definition is of another kind: a discrepancy already
			}
			for _, below := range items[pos+1:] {
				pw[it.choice*n+below.choice]++
			}
			for _, other := range choices {
				if !ranked[int(other)] {
					pw[it.choice*n+int(other)]++
				}
			}
		}
	}
}

// listed are the codes a poll of another kind than single lists, in byte
// order of their ids: the choices of its definition def (an index in
// p.defs, -1 for none) and any candidate with a figure.
func (p *pollLog) listed(def int, figs []figures) []uint32 {
	var out []uint32
	for code, f := range figs {
		if f != (figures{}) || def >= 0 && slices.Contains(p.defCodes[def], uint32(code)) {
			out = append(out, uint32(code))
		}
	}
	slices.SortFunc(out, func(x, y uint32) int { return strings.Compare(p.candidates[x], p.candidates[y]) })
	return out
}

// kindTally is a choice's figures as results of kind k carry them.
func kindTally(k vote.Kind, id string, f figures) Tally {
	t := Tally{CandidateID: id, Votes: f.votes}
	switch k {
	case vote.KindApprove:
		t.Yes, t.No, t.Abstain = &f.yes, &f.no, &f.abstain
	case vote.KindScore:
		t.Score = &f.score
	case vote.KindRanked:
		t.Borda = &f.borda
	}
	return t
}

// pairwise is the matrix pw between the listed choices, by id, and the
// Condorcet winner among them.
func (p *pollLog) pairwise(listed []uint32, pw []int64, n int) (map[string]map[string]int64, *Winner) {
	m := make(map[string]map[string]int64, len(listed))
	winner := &Winner{}
	for _, a := range listed {
		row := make(map[string]int64, len(listed)-1)
		wins := len(listed) > 1
		for _, b := range listed {
			if a == b {
				continue
			}
			row[p.candidates[b]] = pw[int(a)*n+int(b)]
			if pw[int(a)*n+int(b)] <= pw[int(b)*n+int(a)] {
				wins = false
			}
		}
		m[p.candidates[a]] = row
		if wins {
			winner.ID = p.candidates[a]
		}
	}
	return m, winner
}

// Winner is a ranked poll's Condorcet winner: the choice's id, or "" for
// none, which JSON writes null.
type Winner struct{ ID string }

// MarshalJSON writes the winner's id, or null.
func (w Winner) MarshalJSON() ([]byte, error) {
	if w.ID == "" {
		return []byte("null"), nil
	}
	return json.Marshal(w.ID)
}

// UnmarshalJSON reads an id or null.
func (w *Winner) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*w = Winner{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil || !vote.ValidID(s) {
		return errors.New("condorcet_winner is a choice id or null")
	}
	*w = Winner{ID: s}
	return nil
}
