package audit

import (
	"encoding/json"
	"errors"
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

// ReadResults reads published results: JSON objects one after another (one
// per line, or as the endpoint answered them); fields other than poll_id,
// results, total and tree_size are ignored.
func ReadResults(r io.Reader) ([]PublishedResults, error) {
	dec := json.NewDecoder(r)
	var out []PublishedResults
	for n := 1; ; n++ {
		var p PublishedResults
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("results object %d: %v; each is {\"poll_id\", \"results\": [{\"candidate_id\", \"votes\"}], \"total\"}", n, err)
		}
		if !vote.ValidID(p.PollID) {
			return nil, fmt.Errorf("results object %d: poll_id %q is invalid: ids are "+vote.IDRule, n, p.PollID)
		}
		out = append(out, p)
	}
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
	for _, t := range pub.Results {
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
	if pub.Total != total {
		a.discrepancy(Discrepancy{PollID: pub.PollID, Field: "total", Detail: fmt.Sprintf(
			"results object %d: total %d published, %d recounted from the first %d leaves", n, pub.Total, total, size)})
	}
}

// recount is the tally of the first size leaves, by candidate id.
func (p *pollLog) recount(size int64) []Tally {
	counts := make([]int64, len(p.candidates))
	for _, c := range p.votes[:size] {
		counts[c]++
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
