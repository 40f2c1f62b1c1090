package vote

import "strings"

// This file owns the fast reading of a ballot's canonical form: the
// stream, the ledger and the log read every ballot again at each step, and
// encoding/json's reader was most of what a ballot cost them
// (BENCHMARKS.md). The canonical form is a small grammar (ballot.go):
//
//	array  = "[" [ id *( "," id ) ] "]"         id: a quoted choice id
//	object = "{" [ pair *( "," pair ) ] "}"     pair: id ":" ( mark | score )
//	mark   = "\"yes\"" / "\"no\"" / "\"abstain\""
//	score  = "0" / [1-9] *DIGIT                 at most 2^31-1
//
// scanCanonical takes only what Canonical writes; what it does not take,
// ParseCanonical hands to the JSON reader, which says what is wrong. So
// the two readers can only differ in speed (FuzzScanCanonical holds them
// to that). scanBallot takes a little more, for ParseBallot: the same
// grammar with the choices and the keys in any order, as a client spells
// a ballot, which it puts in canonical order (FuzzScanBallot).

// scanCanonical reads s as the canonical form of a ballot of kind k (not
// single): ok is false for anything else.
func scanCanonical(k Kind, s string) (Ballot, bool) {
	b := Ballot{Kind: k}
	switch k {
	case KindMultiple, KindRanked:
		ids, ok := scanIDs(s)
		if !ok || k == KindMultiple && !sortedIDs(ids, false) {
			return Ballot{}, false
		}
		b.Choices = ids
	case KindApprove, KindScore:
		marks, ok := scanMarks(s, k, true)
		if !ok {
			return Ballot{}, false
		}
		b.Marks = marks
	default:
		return Ballot{}, false
	}
	return b, true
}

// scanBallot reads raw as ParseBallot does when it is the canonical
// grammar but for the order of choices and keys; ok is false for anything
// else, a key twice among it.
func scanBallot(k Kind, raw []byte) (Ballot, bool) {
	s := string(raw)
	b := Ballot{Kind: k}
	switch k {
	case KindSingle:
		id, ok := quotedID(s)
		if !ok {
			return Ballot{}, false
		}
		b.Choices = []string{id}
	case KindMultiple, KindRanked:
		ids, ok := scanIDs(s)
		if !ok {
			return Ballot{}, false
		}
		b.Choices = ids
	case KindApprove, KindScore:
		marks, ok := scanMarks(s, k, false)
		if !ok {
			return Ballot{}, false
		}
		b.Marks = marks
	default:
		return Ballot{}, false
	}
	b.sort()
	for i := 1; i < len(b.Marks); i++ {
		if b.Marks[i-1].Choice == b.Marks[i].Choice {
			return Ballot{}, false // the JSON reader names the key given twice
		}
	}
	return b, true
}

// scanIDs reads an array of quoted ids.
func scanIDs(s string) ([]string, bool) {
	var ids []string
	return ids, walkIDs(s, &ids)
}

// walkIDs reports whether s is an array of quoted ids, and puts them in
// *dst unless dst is nil: without it, it allocates nothing. It reads s
// once, byte by byte: the ledger and the log read every ballot so.
func walkIDs(s string, dst *[]string) bool {
	body, ok := delimited(s, '[', ']')
	if !ok {
		return false
	}
	if dst != nil {
		*dst = make([]string, 0, parts(body))
	}
	if body == "" {
		return true
	}
	for n := 1; ; n++ {
		id, rest, ok := leadingID(body)
		if !ok || n > MaxBallotChoices+1 {
			return false
		}
		if dst != nil {
			*dst = append(*dst, id)
		}
		if rest == "" {
			return true
		}
		if rest[0] != ',' {
			return false
		}
		body = rest[1:]
	}
}

// scanMarks reads an object of quoted ids to marks (approve) or scores
// (score); with sorted, only one whose ids are in strictly ascending byte
// order.
func scanMarks(s string, k Kind, sorted bool) ([]Mark, bool) {
	var marks []Mark
	return marks, walkMarks(s, k, sorted, &marks)
}

// walkMarks reports whether s is what scanMarks reads, and puts the marks
// in *dst unless dst is nil: without it, it allocates nothing. It reads s
// once, as walkIDs does.
func walkMarks(s string, k Kind, sorted bool, dst *[]Mark) bool {
	body, ok := delimited(s, '{', '}')
	if !ok {
		return false
	}
	if dst != nil {
		*dst = make([]Mark, 0, parts(body))
	}
	if body == "" {
		return true
	}
	prev := ""
	for n := 1; ; n++ {
		id, rest, ok := leadingID(body)
		if !ok || n > MaxBallotChoices+1 || rest == "" || rest[0] != ':' || sorted && n > 1 && prev >= id {
			return false
		}
		val := rest[1:]
		end := strings.IndexByte(val, ',')
		if end < 0 {
			end = len(val)
		}
		v, ok := markOf(val[:end], k)
		if !ok {
			return false
		}
		if dst != nil {
			*dst = append(*dst, Mark{Choice: id, Value: v})
		}
		if end == len(val) {
			return true
		}
		body, prev = val[end+1:], id
	}
}

// delimited is what s holds between open and close; ok is false when s
// is not so delimited.
func delimited(s string, open, close byte) (string, bool) {
	if len(s) < 2 || s[0] != open || s[len(s)-1] != close {
		return "", false
	}
	return s[1 : len(s)-1], true
}

// parts is how many comma-separated parts body holds (0 for none), at
// most one more than any ballot's choices: what a slice of them needs.
func parts(body string) int {
	if body == "" {
		return 0
	}
	return min(strings.Count(body, ",")+1, MaxBallotChoices+1)
}

// leadingID is the quoted id s starts with, and the rest of s.
func leadingID(s string) (id, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", "", false
	}
	j := 1
	for j < len(s) && idChar(s[j]) {
		j++
	}
	if j == 1 || j > MaxIDLen+1 || j == len(s) || s[j] != '"' {
		return "", "", false
	}
	return s[1:j], s[j+1:], true
}

// quotedID is the id in s, a quoted id and nothing else.
func quotedID(s string) (string, bool) {
	if len(s) < 3 || s[0] != '"' || s[len(s)-1] != '"' || !ValidID(s[1:len(s)-1]) {
		return "", false
	}
	return s[1 : len(s)-1], true
}

// markOf reads an approve mark or a score as Canonical writes them.
func markOf(s string, k Kind) (int, bool) {
	if k == KindApprove {
		switch s {
		case `"yes"`:
			return ApproveYes, true
		case `"no"`:
			return ApproveNo, true
		case `"abstain"`:
			return ApproveAbstain, true
		}
		return 0, false
	}
	if s == "" || len(s) > 10 || s[0] == '0' && len(s) > 1 {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, v <= 1<<31-1
}

// sortedIDs reports whether ids are in ascending byte order (strictly when
// strict).
func sortedIDs(ids []string, strict bool) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i-1] > ids[i] || strict && ids[i-1] == ids[i] {
			return false
		}
	}
	return true
}
