package audit

import (
	"errors"
	"fmt"
	"io"

	"tally/vote"
)

// This file owns the audit of who voted: a poll restricted to a list of
// principals commits that list in its definition by hash alone
// (EligibleListHash), so that the export names no voter who did not
// vote. Given the list (the operator publishes it; tally poll show --format
// json has it), the audit checks that it is the list the poll was defined
// with (its hash is the definition's) and that every vote under that
// definition is of a principal on it. A poll whose list is not given is
// not checked for it; the report says which were.

// EligibleList is the principals a poll restricted to a list takes votes
// from, as given to the audit.
type EligibleList struct {
	PollID     string
	Principals []string
}

// ReadEligible reads a list of principal ids for poll pollID: one id a
// line, under the line rules of every file the audit reads (EachLine:
// blank lines skipped, space, tab and carriage return around a line
// dropped). An id given twice, or a list of none, is refused: the list
// the poll was created with names each principal once, and at least one.
func ReadEligible(pollID string, r io.Reader) (EligibleList, error) {
	l := EligibleList{PollID: pollID}
	first := map[string]int{}
	err := EachLine(r, "eligible list", func(line []byte, n int) error {
		id := string(line)
		if !vote.ValidID(id) {
			return fmt.Errorf("line %d: %.70q is not a principal id (%s); the list holds one id a line", n, id, vote.IDRule)
		}
		if m, ok := first[id]; ok {
			return fmt.Errorf("line %d: principal %s is listed on line %d too; list each principal once", n, id, m)
		}
		first[id] = n
		l.Principals = append(l.Principals, id)
		return nil
	})
	if err != nil {
		return EligibleList{}, err
	}
	if len(l.Principals) == 0 {
		return EligibleList{}, errors.New("the list names no principal; give the poll's eligible principals, one id a line")
	}
	return l, nil
}

// eligibility is a poll's list given to the audit.
type eligibility struct {
	hash [32]byte
	ids  map[string]struct{}
	// matched: the definition in force holds this list's hash, so its
	// votes are checked against it.
	matched bool
	checked bool // some definition of the poll held the list's hash
}

// useEligible keeps each list given, for its poll once the export shows
// it; two lists for one poll are refused.
func (a *auditor) useEligible(lists []EligibleList) error {
	a.eligible = make(map[string]*eligibility, len(lists))
	for _, l := range lists {
		if a.eligible[l.PollID] != nil {
			return fmt.Errorf("audit: two eligible lists are given for poll %s; give the one it was created with", l.PollID)
		}
		e := &eligibility{hash: EligibleListHash(l.Principals), ids: make(map[string]struct{}, len(l.Principals))}
		for _, id := range l.Principals {
			e.ids[id] = struct{}{}
		}
		a.eligible[l.PollID] = e
	}
	return nil
}

// checkEligibleUsed, once the export is read, refuses a list given for a
// poll the export does not hold (the auditor named another poll than
// they meant), and finds a list given for a poll whose log has no
// definition: none commits a list it could be checked against.
func (a *auditor) checkEligibleUsed(lists []EligibleList) error {
	for _, l := range lists {
		p := a.polls[l.PollID]
		if p == nil {
			return fmt.Errorf("audit: an eligible list is given for poll %s, which the export does not hold; check the poll id of the eligible list", l.PollID)
		}
		if p.def == nil {
			a.discrepancy(Discrepancy{PollID: l.PollID, Field: "eligible_hash",
				Detail: "an eligible list was given for the poll, but its log holds no definition, so none commits a list to check it against"})
		}
	}
	return nil
}

// checkEligibleDefinition checks the list given for p, if any, against
// the definition at leaf index, read from line n.
func (a *auditor) checkEligibleDefinition(p *pollLog, d *Definition, index int64, n int) {
	e := p.eligible
	if e == nil {
		return
	}
	e.matched = d.EligibleHash != nil && *d.EligibleHash == e.hash
	e.checked = e.checked || e.matched
	if !e.matched {
		detail := "the eligible list given for the poll does not hash to this definition's eligible_hash: it is not the list the poll was defined with"
		if d.EligibleHash == nil {
			detail = "an eligible list was given for the poll, but this definition takes any principal"
		}
		a.discrepancy(Discrepancy{PollID: d.PollID, Leaves: &LeafRange{index, index}, Field: "eligible_hash", ExportLine: n, Detail: detail})
	}
}

// checkEligibleVote checks the vote of principal at leaf index of p,
// read from line n, against the list given, when the definition in force
// holds the list's hash.
func (a *auditor) checkEligibleVote(p *pollLog, pollID, principal string, index int64, n int) {
	if e := p.eligible; e != nil && e.matched {
		if _, ok := e.ids[principal]; !ok {
			a.discrepancy(Discrepancy{PollID: pollID, Leaves: &LeafRange{index, index}, Field: "principal_id", ExportLine: n,
				Detail: fmt.Sprintf("principal %s is not on the poll's eligible list (the list given, which is the one its definition at leaf %d commits)",
					principal, p.defLeaf)})
		}
	}
}
