package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"tally/vote"
)

// This file owns the audit's third stage: published results read
// (ReadResults) and compared with the recount of their poll at the size
// they count.

// PublishedResults is a poll's results as GET /v1/polls/{id}/results
// answers them. TreeSize, when the results carry it, is the number of
// leaves they are the count of; without it they are compared with the
// whole export. Ballots, Pairwise and CondorcetWinner are the figures of
// polls whose ballot is not single (the results of a single-choice poll
// may carry Ballots, and nothing else of them); a CondorcetWinner of ""
// is null, no winner.
type PublishedResults struct {
	PollID          string                      `json:"poll_id"`
	Results         []Tally                     `json:"results"`
	Total           int64                       `json:"total"`
	Ballots         *int64                      `json:"ballots,omitempty"`
	Pairwise        map[string]map[string]int64 `json:"pairwise,omitempty"`
	CondorcetWinner *Winner                     `json:"condorcet_winner,omitempty"`
	TreeSize        *int64                      `json:"tree_size,omitempty"`
}

// Tally is a candidate's count: its votes and, by the poll's kind, its
// other figures (recount.go): Yes, No and Abstain of an approve poll,
// Score of a score poll, Borda of a ranked poll; nil for the other kinds.
type Tally struct {
	CandidateID string `json:"candidate_id"`
	Votes       int64  `json:"votes"`
	Yes         *int64 `json:"yes,omitempty"`
	No          *int64 `json:"no,omitempty"`
	Abstain     *int64 `json:"abstain,omitempty"`
	Score       *int64 `json:"score,omitempty"`
	Borda       *int64 `json:"borda,omitempty"`
}

// ReadResults reads published results as JSON lines: one object a line,
// as GET /v1/polls/{poll_id}/results answers it (blank lines skipped).
// poll_id, results (each entry's candidate_id, votes, yes, no, abstain,
// score and borda), total, ballots, pairwise, condorcet_winner and
// tree_size are read, spelt exactly and each once (in pairwise too);
// other fields (the answer's as_of, say) are ignored, since they are not
// counts. Which figures a poll's results must carry depends on its kind,
// which only the export says: VerifyExport checks that.
func ReadResults(r io.Reader) ([]PublishedResults, error) {
	var out []PublishedResults
	err := EachLine(r, "results", func(line []byte, n int) error {
		keys, err := checkResultKeys(line)
		if err != nil {
			return fmt.Errorf("results line %d: %v", n, err)
		}
		var p PublishedResults
		dec := json.NewDecoder(bytes.NewReader(line))
		if err := dec.Decode(&p); err != nil {
			return fmt.Errorf("results line %d: %v; each line is one object {\"poll_id\", \"results\": [{\"candidate_id\", \"votes\"}], \"total\"}", n, err)
		}
		if dec.More() {
			return fmt.Errorf("results line %d: data follows the object; each line holds one", n)
		}
		for _, k := range []string{"poll_id", "results", "total"} {
			if v, ok := keys[k]; !ok || string(v) == "null" {
				return fmt.Errorf("results line %d: %s is missing or null; each line is one object {\"poll_id\", \"results\": [{\"candidate_id\", \"votes\"}], \"total\"}, "+
					"as GET /v1/polls/{poll_id}/results answers", n, k)
			}
		}
		if !vote.ValidID(p.PollID) {
			return fmt.Errorf("results line %d: poll_id %q is invalid: ids are "+vote.IDRule, n, p.PollID)
		}
		if p.TreeSize != nil && *p.TreeSize < 0 {
			return fmt.Errorf("results line %d: tree_size is %d: it is the number of leaves the results count, from 0 (or null, or left out, for the whole export)", n, *p.TreeSize)
		}
		if _, ok := keys["condorcet_winner"]; ok && p.CondorcetWinner == nil {
			p.CondorcetWinner = &Winner{} // null: no winner, which the results say
		}
		if _, ok := keys["pairwise"]; ok && p.Pairwise == nil {
			return fmt.Errorf("results line %d: pairwise is null; it is an object of objects, the ballots ranking one choice above another", n)
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return out, nil
}

// The keys of a results object, and of each of its entries.
var (
	resultKeys = []string{"poll_id", "results", "total", "ballots", "pairwise", "condorcet_winner", "tree_size"}
	tallyKeys  = []string{"candidate_id", "votes", "yes", "no", "abstain", "score", "borda"}
)

// checkResultKeys refuses, in the results object line, in each of its
// entries and in its pairwise object and each of its rows, a key given
// twice and a key spelt in another case than one the audit reads
// (encoding/json would match it all the same, and the audit would read
// another count than a reader that matches exactly), and an entry without
// its candidate_id or votes. It returns the object's values by key.
func checkResultKeys(line []byte) (map[string]json.RawMessage, error) {
	top, err := checkKeys(line, resultKeys)
	if err != nil || top == nil {
		return nil, err
	}
	var list []json.RawMessage
	if json.Unmarshal(top["results"], &list) == nil {
		for i, e := range list {
			entry, err := checkKeys(e, tallyKeys)
			if err != nil {
				return nil, fmt.Errorf("results entry %d: %v", i+1, err)
			}
			for _, k := range []string{"candidate_id", "votes"} {
				if v, ok := entry[k]; entry != nil && (!ok || string(v) == "null") {
					return nil, fmt.Errorf("results entry %d: %s is missing or null; each entry is {\"candidate_id\", \"votes\"} and its kind's figures", i+1, k)
				}
			}
		}
	}
	rows, err := checkKeys(top["pairwise"], nil)
	if err != nil {
		return nil, fmt.Errorf("pairwise: %v", err)
	}
	for k, row := range rows {
		if _, err := checkKeys(row, nil); err != nil {
			return nil, fmt.Errorf("pairwise %q: %v", k, err)
		}
	}
	return top, nil
}

// checkKeys checks the keys of the JSON object obj against known, as
// checkResultKeys says, and returns its values by key. What is not an
// object is left to the decode to refuse (nil, nil).
func checkKeys(obj []byte, known []string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil
	}
	values := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil
		}
		key, _ := tok.(string)
		if _, ok := values[key]; ok {
			return nil, fmt.Errorf("key %q is given twice", key)
		}
		for _, k := range known {
			if key != k && strings.EqualFold(key, k) {
				return nil, fmt.Errorf("key %q is spelt %q: keys are matched exactly", k, key)
			}
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil
		}
		values[key] = raw
	}
	return values, nil
}

// compareResults compares each published result with the recount of its
// poll at the size it counts. Results that lack a figure their poll's
// kind has, or carry one it has not, are an error: not results of that
// poll in the format of its kind.
func (a *auditor) compareResults(results []PublishedResults) error {
	for i, pub := range results {
		p := a.polls[pub.PollID]
		if p == nil {
			p = a.poll(pub.PollID)
		}
		size := p.tree.Size()
		d := Discrepancy{PollID: pub.PollID}
		if pub.TreeSize != nil {
			if *pub.TreeSize < 0 || *pub.TreeSize > size {
				d.Field, d.Detail = "tree_size", fmt.Sprintf("results object %d counts %d leaves, the export holds %d", i+1, *pub.TreeSize, size)
				a.discrepancy(d)
				continue
			}
			size = *pub.TreeSize
		}
		c := p.recount(size)
		if err := checkResultsShape(pub, c.kind); err != nil {
			return fmt.Errorf("audit: results object %d, of poll %s (a %s poll): %v", i+1, pub.PollID, c.kind, err)
		}
		p.compared++
		a.compareTallies(pub, c, size, i+1)
	}
	return nil
}

// checkResultsShape says what makes pub no results of a poll of kind k:
// a figure of k missing (ballots, each entry's yes, no and abstain,
// score or borda, pairwise and condorcet_winner), or one of another kind
// given. Single-choice results may leave ballots out.
func checkResultsShape(pub PublishedResults, k vote.Kind) error {
	if pub.Ballots == nil && k != vote.KindSingle {
		return errors.New(`the results lack "ballots", the number of ballots counted`)
	}
	for _, t := range pub.Results {
		for _, f := range []struct {
			name  string
			given bool
			kind  vote.Kind
		}{
			{"yes", t.Yes != nil, vote.KindApprove}, {"no", t.No != nil, vote.KindApprove}, {"abstain", t.Abstain != nil, vote.KindApprove},
			{"score", t.Score != nil, vote.KindScore}, {"borda", t.Borda != nil, vote.KindRanked},
		} {
			if f.given != (k == f.kind) {
				return fmt.Errorf("the entry of candidate %s %s %q: the results of a %s poll give each choice %s", t.CandidateID, givesOrLacks(f.given), f.name, k, kindFigures(k))
			}
		}
	}
	for _, f := range []struct {
		name  string
		given bool
	}{{"pairwise", pub.Pairwise != nil}, {"condorcet_winner", pub.CondorcetWinner != nil}} {
		if f.given != (k == vote.KindRanked) {
			return fmt.Errorf("the results %s %q, which the results of a ranked poll, and only they, carry", givesOrLacks(f.given), f.name)
		}
	}
	return nil
}

func givesOrLacks(given bool) string {
	if given {
		return "gives"
	}
	return "lacks"
}

// kindFigures names the figures of a choice in the results of kind k.
func kindFigures(k vote.Kind) string {
	switch k {
	case vote.KindApprove:
		return "votes, yes, no and abstain"
	case vote.KindScore:
		return "votes and score"
	case vote.KindRanked:
		return "votes and borda"
	}
	return "votes only"
}

// compareTallies compares one published result with the recount c at
// size.
func (a *auditor) compareTallies(pub PublishedResults, c pollCount, size int64, n int) {
	found := func(field, format string, args ...any) {
		a.discrepancy(Discrepancy{PollID: pub.PollID, Field: field, Detail: fmt.Sprintf("results object %d: ", n) + fmt.Sprintf(format, args...)})
	}
	counted := map[string]Tally{}
	for _, t := range c.tallies {
		counted[t.CandidateID] = t
	}
	seen := map[string]bool{}
	var listed int64
	for _, t := range pub.Results {
		listed += t.Votes
		if seen[t.CandidateID] {
			found("results", "candidate %s is listed twice; each candidate has one entry", t.CandidateID)
			continue
		}
		seen[t.CandidateID] = true
		r := counted[t.CandidateID]
		for _, f := range tallyFigures(t, r) {
			if f.published != f.recounted {
				found(f.name, "candidate %s has %s %d published, %d recounted from the first %d leaves", t.CandidateID, f.name, f.published, f.recounted, size)
			}
		}
	}
	var total int64
	for _, t := range c.tallies {
		total += t.Votes
		if !seen[t.CandidateID] && slices.ContainsFunc(tallyFigures(Tally{}, t), func(f figure) bool { return f.recounted != 0 }) {
			found("results", "candidate %s is not published, %d votes recounted from the first %d leaves", t.CandidateID, t.Votes, size)
		}
	}
	if pub.Total != listed {
		found("total", "total %d published, but its entries sum to %d", pub.Total, listed)
	}
	if pub.Total != total {
		found("total", "total %d published, %d recounted from the first %d leaves", pub.Total, total, size)
	}
	if pub.Ballots != nil && *pub.Ballots != c.ballots {
		found("ballots", "%d ballots published, %d recounted from the first %d leaves", *pub.Ballots, c.ballots, size)
	}
	if c.kind == vote.KindRanked {
		a.comparePairwise(pub, c, size, found)
	}
}

// figure is one figure of a candidate, published and recounted.
type figure struct {
	name                 string
	published, recounted int64
}

// tallyFigures pairs the figures of pub and rec, each of those either
// carries (a figure one lacks is 0 there).
func tallyFigures(pub, rec Tally) []figure {
	out := []figure{{"votes", pub.Votes, rec.Votes}}
	for _, f := range []struct {
		name     string
		pub, rec *int64
	}{{"yes", pub.Yes, rec.Yes}, {"no", pub.No, rec.No}, {"abstain", pub.Abstain, rec.Abstain}, {"score", pub.Score, rec.Score}, {"borda", pub.Borda, rec.Borda}} {
		if f.pub != nil || f.rec != nil {
			out = append(out, figure{f.name, deref(f.pub), deref(f.rec)})
		}
	}
	return out
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// comparePairwise compares a ranked poll's published pairwise matrix and
// Condorcet winner with the recount c: every cell the recount has (each
// ordered pair of its choices) published with its count, no other cell
// published.
func (a *auditor) comparePairwise(pub PublishedResults, c pollCount, size int64, found func(field, format string, args ...any)) {
	for _, x := range slices.Sorted(maps.Keys(c.pairwise)) {
		for _, y := range slices.Sorted(maps.Keys(c.pairwise[x])) {
			got, ok := pub.Pairwise[x][y]
			switch {
			case !ok:
				found("pairwise", "the ballots ranking %s above %s are not published, %d recounted from the first %d leaves", x, y, c.pairwise[x][y], size)
			case got != c.pairwise[x][y]:
				found("pairwise", "%d ballots ranking %s above %s published, %d recounted from the first %d leaves", got, x, y, c.pairwise[x][y], size)
			}
		}
	}
	for _, x := range slices.Sorted(maps.Keys(pub.Pairwise)) {
		for _, y := range slices.Sorted(maps.Keys(pub.Pairwise[x])) {
			if _, ok := c.pairwise[x][y]; !ok {
				found("pairwise", "a count of ballots ranking %s above %s is published, but the recount has no such pair of the poll's choices", x, y)
			}
		}
	}
	if pub.CondorcetWinner.ID != c.condorcet.ID {
		found("condorcet_winner", "condorcet_winner %s published, %s recounted from the first %d leaves", winnerText(*pub.CondorcetWinner), winnerText(*c.condorcet), size)
	}
}

func winnerText(w Winner) string {
	if w.ID == "" {
		return "null (none)"
	}
	return w.ID
}
