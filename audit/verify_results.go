package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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
// whole export.
type PublishedResults struct {
	PollID   string  `json:"poll_id"`
	Results  []Tally `json:"results"`
	Total    int64   `json:"total"`
	TreeSize *int64  `json:"tree_size,omitempty"`
}

// Tally is a candidate's count of votes.
type Tally struct {
	CandidateID string `json:"candidate_id"`
	Votes       int64  `json:"votes"`
}

// ReadResults reads published results as JSON lines: one object a line,
// as GET /v1/polls/{poll_id}/results answers it (blank lines skipped).
// poll_id, results (each entry's candidate_id and votes), total and
// tree_size are read, spelt exactly and each once; other fields (the
// answer's as_of, say) are ignored, since they are not counts.
func ReadResults(r io.Reader) ([]PublishedResults, error) {
	var out []PublishedResults
	err := eachLine(r, func(line []byte, n int) error {
		if err := checkResultKeys(line); err != nil {
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
		if !vote.ValidID(p.PollID) {
			return fmt.Errorf("results line %d: poll_id %q is invalid: ids are "+vote.IDRule, n, p.PollID)
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
	resultKeys = []string{"poll_id", "results", "total", "tree_size"}
	tallyKeys  = []string{"candidate_id", "votes"}
)

// checkResultKeys refuses, in the results object line and in each of its
// entries, a key given twice and a key spelt in another case than one
// the audit reads (encoding/json would match it all the same, and the
// audit would read another count than a reader that matches exactly).
func checkResultKeys(line []byte) error {
	entries, err := checkKeys(line, resultKeys, "results")
	if err != nil || entries == nil {
		return err
	}
	var list []json.RawMessage
	if err := json.Unmarshal(entries, &list); err != nil {
		return nil // the decode says what is wrong
	}
	for i, e := range list {
		if _, err := checkKeys(e, tallyKeys, ""); err != nil {
			return fmt.Errorf("results entry %d: %v", i+1, err)
		}
	}
	return nil
}

// checkKeys checks the keys of the JSON object obj against known, as
// checkResultKeys says, and returns the value of the key nested (nil when
// absent or when nested is ""). What is not an object is left to the
// decode to refuse.
func checkKeys(obj []byte, known []string, nested string) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil
	}
	seen := map[string]bool{}
	var value json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil
		}
		key, _ := tok.(string)
		if seen[key] {
			return nil, fmt.Errorf("key %q is given twice", key)
		}
		seen[key] = true
		for _, k := range known {
			if key != k && strings.EqualFold(key, k) {
				return nil, fmt.Errorf("key %q is spelt %q: keys are matched exactly", k, key)
			}
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil
		}
		if key == nested {
			value = raw
		}
	}
	return value, nil
}

// compareResults compares each published result with the recount of its
// poll at the size it counts.
func (a *auditor) compareResults(results []PublishedResults) {
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
		p.compared++
		a.compareTallies(pub, p.recount(size), size, i+1)
	}
}

// compareTallies compares one published result with the recount at size.
func (a *auditor) compareTallies(pub PublishedResults, recount []Tally, size int64, n int) {
	counted := map[string]int64{}
	for _, t := range recount {
		counted[t.CandidateID] = t.Votes
	}
	seen := map[string]bool{}
	var listed int64
	for _, t := range pub.Results {
		listed += t.Votes
		if seen[t.CandidateID] {
			a.discrepancy(Discrepancy{PollID: pub.PollID, Field: "results", Detail: fmt.Sprintf(
				"results object %d: candidate %s is listed twice; each candidate has one entry", n, t.CandidateID)})
			continue
		}
		seen[t.CandidateID] = true
		if t.Votes != counted[t.CandidateID] {
			a.discrepancy(Discrepancy{PollID: pub.PollID, Field: "votes", Detail: fmt.Sprintf(
				"results object %d: candidate %s has %d votes published, %d recounted from the first %d leaves", n, t.CandidateID, t.Votes, counted[t.CandidateID], size)})
		}
	}
	var total int64
	for _, t := range recount {
		total += t.Votes
		if !seen[t.CandidateID] {
			a.discrepancy(Discrepancy{PollID: pub.PollID, Field: "results", Detail: fmt.Sprintf(
				"results object %d: candidate %s is not published, %d votes recounted from the first %d leaves", n, t.CandidateID, t.Votes, size)})
		}
	}
	if pub.Total != listed {
		a.discrepancy(Discrepancy{PollID: pub.PollID, Field: "total", Detail: fmt.Sprintf(
			"results object %d: total %d published, but its entries sum to %d", n, pub.Total, listed)})
	}
	if pub.Total != total {
		a.discrepancy(Discrepancy{PollID: pub.PollID, Field: "total", Detail: fmt.Sprintf(
			"results object %d: total %d published, %d recounted from the first %d leaves", n, pub.Total, total, size)})
	}
}

// recount is the tally of the first size leaves, by candidate id.
func (p *pollLog) recount(size int64) []Tally {
	counts := make([]int64, len(p.candidates))
	for _, c := range p.votes[:size] {
		if c != notVote {
			counts[c]++
		}
	}
	var out []Tally
	for code, n := range counts {
		if n > 0 {
			out = append(out, Tally{p.candidates[code], n})
		}
	}
	slices.SortFunc(out, func(x, y Tally) int { return strings.Compare(x.CandidateID, y.CandidateID) })
	return out
}
