package vote

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func ip(v int) *int { return &v }

func TestNewRules(t *testing.T) {
	for _, tc := range []struct {
		spec  Spec
		n     int
		want  Rules
		field string // of the error; "" for none
	}{
		{Spec{}, 3, Single, ""},
		{Spec{Answers: "latest"}, 3, Rules{Kind: KindSingle, Answers: AnswersLatest}, ""},
		{Spec{Kind: "multiple"}, 4, Rules{Kind: KindMultiple, MinChoices: 1, MaxChoices: 4, Answers: AnswersFinal}, ""},
		{Spec{Kind: "multiple", MinChoices: ip(0), MaxChoices: ip(2)}, 4, Rules{Kind: KindMultiple, MaxChoices: 2, Answers: AnswersFinal}, ""},
		{Spec{Kind: "multiple", MinChoices: ip(3), MaxChoices: ip(2)}, 4, Rules{}, "ballot.min_choices"},
		{Spec{Kind: "multiple", MinChoices: ip(-1)}, 4, Rules{}, "ballot.min_choices"},
		{Spec{Kind: "multiple", MaxChoices: ip(0)}, 4, Rules{}, "ballot.max_choices"},
		{Spec{Kind: "multiple", MaxChoices: ip(5)}, 4, Rules{}, "ballot.max_choices"},
		{Spec{Kind: "multiple", MaxScore: ip(5)}, 4, Rules{}, "ballot.max_score"},
		{Spec{Kind: "score", MaxScore: ip(5), Budget: ip(10)}, 4, Rules{Kind: KindScore, MaxScore: 5, Budget: 10, Answers: AnswersFinal}, ""},
		{Spec{Kind: "score", MaxScore: ip(MaxScoreLimit)}, 4, Rules{Kind: KindScore, MaxScore: MaxScoreLimit, Answers: AnswersFinal}, ""},
		{Spec{Kind: "score", MaxScore: ip(MaxScoreLimit + 1)}, 4, Rules{}, "ballot.max_score"},
		{Spec{Kind: "score"}, 4, Rules{}, "ballot.max_score"},
		{Spec{Kind: "score", MaxScore: ip(0)}, 4, Rules{}, "ballot.max_score"},
		{Spec{Kind: "score", MaxScore: ip(5), Budget: ip(0)}, 4, Rules{}, "ballot.budget"},
		{Spec{Kind: "score", MaxScore: ip(5), Budget: ip(1)}, 4, Rules{Kind: KindScore, MaxScore: 5, Budget: 1, Answers: AnswersFinal}, ""},
		{Spec{Kind: "score", MaxScore: ip(5), MinChoices: ip(1)}, 4, Rules{}, "ballot.min_choices"},
		{Spec{Kind: "approve", Budget: ip(3)}, 4, Rules{}, "ballot.budget"},
		{Spec{Kind: "ranked"}, MaxRankedChoices, Rules{Kind: KindRanked, Answers: AnswersFinal}, ""},
		{Spec{Kind: "ranked"}, MaxRankedChoices + 1, Rules{}, "choices"},
		{Spec{Kind: "approve"}, MaxBallotChoices + 1, Rules{}, "choices"},
		{Spec{}, MaxBallotChoices + 1, Single, ""},
		{Spec{Kind: "borda"}, 4, Rules{}, "ballot.kind"},
		{Spec{Kind: "single", Answers: "first"}, 4, Rules{}, "answers"},
	} {
		got, err := NewRules(tc.spec, tc.n)
		var re *RuleError
		switch {
		case tc.field == "" && (err != nil || got != tc.want):
			t.Errorf("NewRules(%+v, %d) = %+v, %v; want %+v", tc.spec, tc.n, got, err, tc.want)
		case tc.field != "" && (!errors.As(err, &re) || re.Field != tc.field):
			t.Errorf("NewRules(%+v, %d) = %v; want an error of field %s", tc.spec, tc.n, err, tc.field)
		case tc.field == "":
			if again, err := NewRules(got.Spec(), tc.n); err != nil || again != got {
				t.Errorf("NewRules(%+v.Spec()) = %+v, %v; want it again", got, again, err)
			}
		}
	}
}

func TestParseBallotCanonical(t *testing.T) {
	for _, tc := range []struct {
		kind      Kind
		in, canon string
	}{
		{KindSingle, `"a"`, "a"},
		{KindSingle, ` "a" `, "a"},
		{KindMultiple, `["c","a"]`, `["a","c"]`},
		{KindMultiple, `[]`, `[]`},
		{KindMultiple, `["\u0061"]`, `["a"]`},
		{KindRanked, `["c","a","b"]`, `["c","a","b"]`},
		{KindApprove, `{"b":"no","a":"yes"}`, `{"a":"yes","b":"no"}`},
		{KindApprove, `{"a":"abstain"}`, `{"a":"abstain"}`},
		{KindScore, `{"b":0,"a":3}`, `{"a":3,"b":0}`},
		{KindScore, `{}`, `{}`},
	} {
		b, err := ParseBallot(tc.kind, []byte(tc.in))
		if err != nil || b.Canonical() != tc.canon {
			t.Errorf("ParseBallot(%s, %s) = %q, %v; want %q", tc.kind, tc.in, b.Canonical(), err, tc.canon)
			continue
		}
		again, err := ParseCanonical(tc.kind, tc.canon)
		if err != nil || again.Canonical() != tc.canon || !ValidCanonical(tc.canon) {
			t.Errorf("ParseCanonical(%s, %s): %v", tc.kind, tc.canon, err)
		}
		if tc.in != tc.canon && tc.kind != KindSingle {
			if _, err := ParseCanonical(tc.kind, tc.in); err == nil {
				t.Errorf("ParseCanonical(%s, %s) took a form that is not canonical", tc.kind, tc.in)
			}
		}
	}
}

func TestParseBallotRefusesShapes(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		in   string
		says string
	}{
		{KindSingle, `["a"]`, "an array"},
		{KindSingle, `"a b"`, "not an id"},
		{KindMultiple, `"a"`, "not the string"},
		{KindMultiple, `["a",1]`, "the number"},
		{KindMultiple, `["a"] x`, "goes on"},
		{KindMultiple, `["a"]["b"]`, "goes on"},
		{KindMultiple, `[`, "not valid JSON"},
		{KindRanked, `{"a":1}`, "an object"},
		{KindApprove, `{"a":"maybe"}`, `"yes", "no" or "abstain"`},
		{KindApprove, `{"a":true}`, "a boolean"},
		{KindApprove, `{"a":"yes","a":"no"}`, "twice"},
		{KindApprove, `["a"]`, "an array"},
		{KindScore, `{"a":1.5}`, "whole number"},
		{KindScore, `{"a":1e2}`, "whole number"},
		{KindScore, `{"a":-1}`, "0 or more"},
		{KindScore, `{"a":"3"}`, "the string"},
		{KindScore, `{"a":99999999999}`, "whole number"},
		{KindScore, `{"a b":1}`, "not an id"},
		{KindScore, `null`, "null"},
	} {
		_, err := ParseBallot(tc.kind, []byte(tc.in))
		var se *ShapeError
		if !errors.As(err, &se) || !strings.Contains(se.Reason, tc.says) {
			t.Errorf("ParseBallot(%s, %s) = %v; want a shape error saying %q", tc.kind, tc.in, err, tc.says)
		}
	}
}

func TestCheck(t *testing.T) {
	choices := []string{"a", "b", "c", "d"}
	multi, _ := NewRules(Spec{Kind: "multiple", MinChoices: ip(1), MaxChoices: ip(2)}, 4)
	zero, _ := NewRules(Spec{Kind: "multiple", MinChoices: ip(0)}, 4)
	score, _ := NewRules(Spec{Kind: "score", MaxScore: ip(5), Budget: ip(8)}, 4)
	ranked, _ := NewRules(Spec{Kind: "ranked"}, 4)
	approve, _ := NewRules(Spec{Kind: "approve"}, 4)
	for _, tc := range []struct {
		r    Rules
		in   string
		rule string // "" for none
	}{
		{multi, `["a"]`, ""},
		{multi, `["a","b"]`, ""},
		{multi, `["a","b","c"]`, RuleTooMany},
		{multi, `[]`, RuleTooFew},
		{zero, `[]`, ""},
		{multi, `["a","a"]`, RuleTwice},
		{multi, `["x"]`, RuleUnknownChoice},
		{ranked, `["d","a"]`, ""},
		{ranked, `[]`, RuleTooFew},
		{ranked, `["a","b","a"]`, RuleTwice},
		{score, `{"a":5,"b":3}`, ""},
		{score, `{"a":6}`, RuleOverMaxScore},
		{score, `{"a":5,"b":4}`, RuleOverBudget},
		{score, `{"x":1}`, RuleUnknownChoice},
		{approve, `{"a":"yes","d":"abstain"}`, ""},
		{approve, `{}`, ""},
	} {
		b, err := ParseBallot(tc.r.Kind, []byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		err = tc.r.Check(choices, b)
		var re *RuleError
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s %s: %v, want it taken", tc.r.Kind, tc.in, err)
		case tc.rule != "" && (!errors.As(err, &re) || re.Rule != tc.rule || re.Field != "ballot"):
			t.Errorf("%s %s: %v, want rule %s", tc.r.Kind, tc.in, err, tc.rule)
		}
	}
	if err := multi.Check(choices, Ballot{Kind: KindRanked, Choices: []string{"a"}}); err == nil {
		t.Error("a ranked ballot was taken by a multiple poll")
	}
	if err := score.Check(choices, Ballot{Kind: KindScore, Marks: []Mark{{"a", 1}, {"a", 2}}}); err == nil {
		t.Error("a score ballot marking a choice twice was taken")
	}
	// Past the 64th choice Check finds a choice given twice another way.
	many := make([]string, 70)
	for i := range many {
		many[i] = "c" + strconv.Itoa(i)
	}
	wide := Rules{Kind: KindMultiple, MinChoices: 1, MaxChoices: 70, Answers: AnswersFinal}
	if err := wide.Check(many, Ballot{Kind: KindMultiple, Choices: []string{"c1", "c65", "c69"}}); err != nil {
		t.Errorf("choices past the 64th: %v, want them taken", err)
	}
	if err := wide.Check(many, Ballot{Kind: KindMultiple, Choices: []string{"c65", "c1", "c65"}}); err == nil {
		t.Error("a choice past the 64th given twice was taken")
	}
}

// FuzzParseBallot: whatever ParseBallot takes has a canonical form that
// ParseCanonical takes back as the same ballot, and that nothing else
// spells.
func FuzzParseBallot(f *testing.F) {
	for _, s := range []string{`"a"`, `["c","a"]`, `{"b":"no","a":"yes"}`, `{"a":3,"b":0}`, `[]`, `{}`, `["a","a"]`} {
		for k := range len(Kinds) {
			f.Add(uint8(k), s)
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, s string) {
		kind := Kinds[int(k)%len(Kinds)]
		b, err := ParseBallot(kind, []byte(s))
		if err != nil {
			var se *ShapeError
			if !errors.As(err, &se) {
				t.Fatalf("ParseBallot(%s, %q): %v is not a ShapeError", kind, s, err)
			}
			return
		}
		c := b.Canonical()
		again, err := ParseCanonical(kind, c)
		if err != nil || again.Canonical() != c {
			t.Fatalf("ParseBallot(%s, %q) = %q, which ParseCanonical reads as %q, %v", kind, s, c, again.Canonical(), err)
		}
		if !ValidCanonical(c) {
			t.Fatalf("ValidCanonical(%q) = false", c)
		}
	})
}

// parseCanonicalJSON is ParseCanonical by encoding/json alone: the
// definition the fast scanner must keep to.
func parseCanonicalJSON(k Kind, s string) (Ballot, bool) {
	b, err := parseBallotJSON(k, []byte(s))
	return b, err == nil && b.Canonical() == s
}

// FuzzScanBallot: what the scanner of client ballots takes, the JSON
// reader takes too and reads the same; and the scanner takes every
// compact spelling of a ballot the JSON reader takes, so that it is the
// fast path.
func FuzzScanBallot(f *testing.F) {
	for _, s := range []string{`"a"`, `["a","c"]`, `["c","a"]`, `["a","a"]`, `{"a":"yes","b":"no"}`, `{"b":1,"a":2}`, `{"a":0}`,
		`{"a":01}`, `{"a":2147483648}`, `[]`, `{}`, `[ "a"]`, `{"a":"yes","a":"no"}`, `{"b":3,"a":1,"b":2}`, `["a",]`, `{"a":-1}`, `"\u0061"`} {
		for k := range Kinds {
			f.Add(uint8(k), s)
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, s string) {
		kind := Kinds[int(k)%len(Kinds)]
		fast, okFast := scanBallot(kind, []byte(s))
		slow, err := parseBallotJSON(kind, []byte(s))
		if okFast && err != nil {
			t.Fatalf("%s %q: the scanner reads %q, the JSON reader refuses it: %v", kind, s, fast.Canonical(), err)
		}
		if okFast && !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s %q: the scanner reads %#v, the JSON reader %#v", kind, s, fast, slow)
		}
		if !okFast && err == nil && compact(s) {
			t.Fatalf("%s %q: the JSON reader takes it, the scanner does not", kind, s)
		}
	})
}

// compact reports whether s holds no byte that only the JSON reader takes
// (white space, an escape, a minus: "-0" is a score of 0 to it).
func compact(s string) bool { return !strings.ContainsAny(s, " \t\n\r\\-") }

// FuzzScanCanonical: the fast scanner takes only canonical forms, reads
// them as the JSON reader does, and takes every canonical form of a ballot
// the JSON reader takes (so that it is the fast path, not a rare one).
func FuzzScanCanonical(f *testing.F) {
	for _, s := range []string{`["a","c"]`, `["c","a"]`, `["a","a"]`, `{"a":"yes","b":"no"}`, `{"b":1,"a":2}`, `{"a":0}`,
		`{"a":01}`, `{"a":2147483648}`, `[]`, `{}`, `[ "a"]`, `{"a":"yes","a":"no"}`, `["a",]`, `{"a":-1}`} {
		for k := range len(Kinds) - 1 {
			f.Add(uint8(k), s)
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, s string) {
		kind := Kinds[1+int(k)%(len(Kinds)-1)]
		fast, okFast := scanCanonical(kind, s)
		slow, okSlow := parseCanonicalJSON(kind, s)
		if okFast != okSlow {
			t.Fatalf("%s %q: the scanner says %v, the JSON reader %v", kind, s, okFast, okSlow)
		}
		if okFast && fast.Canonical() != slow.Canonical() {
			t.Fatalf("%s %q: the scanner reads %q, the JSON reader %q", kind, s, fast.Canonical(), slow.Canonical())
		}
		if okSlow != ValidCanonicalKind(kind, s) {
			t.Fatalf("%s %q: ValidCanonical disagrees", kind, s)
		}
	})
}

// ValidCanonicalKind is whether ParseCanonical(k, s) takes s.
func ValidCanonicalKind(k Kind, s string) bool {
	_, err := ParseCanonical(k, s)
	return err == nil
}

// FuzzValidCanonical: ValidCanonical, which reads without making a
// ballot, takes exactly what its definition takes: an id, or a canonical
// form that ParseCanonical, by encoding/json's reader, takes for some
// kind.
func FuzzValidCanonical(f *testing.F) {
	for _, s := range []string{"a", `["a","c"]`, `["c","a"]`, `["a","a"]`, `{"a":"yes","b":"no"}`, `{"b":1,"a":2}`, `{"a":0,"b":"no"}`,
		`{"a":"yes","b":3}`, `{"a":01}`, `{"a":2147483648}`, `[]`, `{}`, `[ "a"]`, `{"a":"yes","a":"no"}`, `["a",]`, `{"a":1,}`, `{"a":-1}`, `[`, `{`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := ValidID(s)
		for _, k := range Kinds[1:] {
			if _, ok := parseCanonicalJSON(k, s); ok && len(s) <= MaxCanonicalLen {
				want = true
			}
		}
		if got := ValidCanonical(s); got != want {
			t.Fatalf("ValidCanonical(%q) = %v, its definition says %v", s, got, want)
		}
	})
}

func TestValidCanonicalAllocates(t *testing.T) {
	for _, bb := range benchBallots {
		if n := testing.AllocsPerRun(100, func() { ValidCanonical(bb.s) }); n != 0 {
			t.Errorf("ValidCanonical(%q) allocates %v times; it reads without making the ballot", bb.s, n)
		}
	}
}
