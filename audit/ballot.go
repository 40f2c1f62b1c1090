package audit

import (
	"fmt"
	"slices"
	"strings"

	"tally/vote"
)

// This file owns the audit's reading of a vote's ballot against the
// definition in force at its leaf (docs/audit.md, "Ballots"): the
// canonical form read byte by byte, then the poll's rules. It is the
// audit's own copy of what package vote's ParseCanonical and Rules.Check
// decide, written apart on purpose: an auditor reads the rules here, and
// a mistake in vote's reading cannot hide in the audit that checks it. It
// uses only vote's id rule, the names of the kinds and of the approve
// marks, and vote.Shape's words in its messages.

// ballotItem is one choice of a read ballot: the choice's position among
// the definition's choices, and its value (approve: 0 yes, 1 no, 2
// abstain; score: the score; otherwise 0). A ranked ballot's items are in
// order of preference, every other kind's in byte order of their ids.
type ballotItem struct {
	choice int
	value  int64
}

// The approve marks, in the order of their values.
var approveMarks = []string{vote.Yes, vote.No, vote.Abstain}

// maxCanonicalScore is the largest score a canonical ballot spells (a
// 32-bit signed integer); above it, the text is no canonical ballot.
const maxCanonicalScore = 1<<31 - 1

// readBallot reads the canonical ballot s, a vote's ballot or candidate
// id, against d: its shape that of d's kind, in canonical form, each
// choice one of d's, none twice, and within the rules' bounds. It returns
// the items, or why not.
func readBallot(d *Definition, s string) ([]ballotItem, string) {
	rules := d.BallotRules()
	items, why := parseCanonicalBallot(rules.Kind, s, d.Choices)
	if why != "" {
		return nil, why
	}
	seen := make(map[int]bool, len(items))
	for _, it := range items {
		if seen[it.choice] {
			return nil, fmt.Sprintf("the ballot gives choice %s twice: a ballot names each choice at most once", d.Choices[it.choice])
		}
		seen[it.choice] = true
	}
	switch rules.Kind {
	case vote.KindMultiple:
		if len(items) < rules.MinChoices {
			return nil, fmt.Sprintf("the ballot holds %d choices; the poll takes at least %d (min_choices)", len(items), rules.MinChoices)
		}
		if len(items) > rules.MaxChoices {
			return nil, fmt.Sprintf("the ballot holds %d choices; the poll takes at most %d (max_choices)", len(items), rules.MaxChoices)
		}
	case vote.KindRanked:
		if len(items) == 0 {
			return nil, "the ballot ranks no choice; a ranked ballot ranks at least one"
		}
	case vote.KindScore:
		var sum int64
		for _, it := range items {
			if it.value > int64(rules.MaxScore) {
				return nil, fmt.Sprintf("the ballot scores %s %d, above the poll's max_score %d", d.Choices[it.choice], it.value, rules.MaxScore)
			}
			sum += it.value
		}
		if rules.Budget > 0 && sum > int64(rules.Budget) {
			return nil, fmt.Sprintf("the ballot spends %d points, over the poll's budget of %d", sum, rules.Budget)
		}
	}
	return items, ""
}

// parseCanonicalBallot reads s as the canonical form of a ballot of kind
// k over choices: a choice id (single); an array of quoted ids, no
// space, in byte order (multiple) or any order (ranked); an object of
// quoted ids in byte order, no space, to "yes", "no" or "abstain"
// (approve) or to a whole number in decimal without sign or leading zero
// (score). A choice twice is left for the caller to say, except in an
// object, whose keys in byte order cannot repeat.
func parseCanonicalBallot(k vote.Kind, s string, choices []string) ([]ballotItem, string) {
	index := func(id string) (int, string) {
		if i := slices.Index(choices, id); i >= 0 {
			return i, ""
		}
		return 0, fmt.Sprintf("the ballot names %s, which the poll's definition in force does not offer", id)
	}
	if k == vote.KindSingle {
		if !vote.ValidID(s) {
			return nil, fmt.Sprintf("the ballot %s is not one choice id, as a single-choice poll's is", quoteShort(s))
		}
		i, why := index(s)
		return []ballotItem{{choice: i}}, why
	}
	open, end := byte('['), byte(']')
	if k == vote.KindApprove || k == vote.KindScore {
		open, end = '{', '}'
	}
	notCanonical := fmt.Sprintf("the ballot %s is not a %s ballot in canonical form: %s, no space, %s", quoteShort(s), k, vote.Shape(k), orderRule(k))
	if len(s) < 2 || s[0] != open || s[len(s)-1] != end {
		return nil, notCanonical
	}
	body := s[1 : len(s)-1]
	var items []ballotItem
	prev := ""
	for n := 0; body != ""; n++ {
		if n > 0 {
			var ok bool
			if body, ok = strings.CutPrefix(body, ","); !ok {
				return nil, notCanonical
			}
		}
		id, rest, ok := cutQuotedID(body)
		if !ok {
			return nil, notCanonical
		}
		body = rest
		// Byte order: a multiple ballot's elements (equal ones are a choice
		// twice, which the caller says), an object's keys strictly.
		if n > 0 && (k == vote.KindMultiple && id < prev || (k == vote.KindApprove || k == vote.KindScore) && id <= prev) {
			return nil, notCanonical
		}
		prev = id
		it := ballotItem{}
		var why string
		if it.choice, why = index(id); why != "" {
			return nil, why
		}
		if k == vote.KindApprove || k == vote.KindScore {
			if body, ok = strings.CutPrefix(body, ":"); !ok {
				return nil, notCanonical
			}
			if it.value, body, ok = cutMark(k, body); !ok {
				return nil, notCanonical
			}
		}
		items = append(items, it)
	}
	return items, ""
}

// orderRule says in words the order of a kind's canonical form.
func orderRule(k vote.Kind) string {
	switch k {
	case vote.KindRanked:
		return "most preferred first"
	case vote.KindMultiple:
		return "the ids in byte order"
	}
	return "the keys in byte order"
}

// cutQuotedID cuts a quoted id off the front of s.
func cutQuotedID(s string) (id, rest string, ok bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", s, false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 || !vote.ValidID(s[1:1+end]) {
		return "", s, false
	}
	return s[1 : 1+end], s[2+end:], true
}

// cutMark cuts the value of an approve or score ballot's choice off the
// front of s.
func cutMark(k vote.Kind, s string) (int64, string, bool) {
	if k == vote.KindApprove {
		for v, m := range approveMarks {
			if rest, ok := strings.CutPrefix(s, `"`+m+`"`); ok {
				return int64(v), rest, true
			}
		}
		return 0, s, false
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 1 && s[0] == '0' || i > 10 {
		return 0, s, false
	}
	var v int64
	for _, c := range s[:i] {
		v = v*10 + int64(c-'0')
	}
	if v > maxCanonicalScore {
		return 0, s, false
	}
	return v, s[i:], true
}
