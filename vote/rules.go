package vote

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// This file owns what a poll may ask for: the kinds of ballot and the
// answers modes, a poll's Rules (made from what was asked for by
// NewRules, with their defaults and limits), and Rules.Check, the check of
// one ballot against its poll. ballot.go owns a ballot's value and its
// canonical form.

// Kind is what a poll's ballot holds.
type Kind string

// The kinds of ballot. KindSingle is the default.
const (
	KindSingle   Kind = "single"   // one choice
	KindMultiple Kind = "multiple" // a set of distinct choices, MinChoices to MaxChoices
	KindApprove  Kind = "approve"  // yes, no or abstain for each choice marked
	KindScore    Kind = "score"    // an integer 0..MaxScore for each choice scored, in all at most Budget
	KindRanked   Kind = "ranked"   // distinct choices, most preferred first
)

// A is the kind with its indefinite article, for messages: "an approve".
func (k Kind) A() string {
	if k == KindApprove {
		return "an " + string(k)
	}
	return "a " + string(k)
}

// Kinds lists every kind, in the order the documents list them.
var Kinds = []Kind{KindSingle, KindMultiple, KindApprove, KindScore, KindRanked}

// Answers says which of a principal's ballots counts.
type Answers string

// The answers modes. AnswersFinal is the default.
const (
	AnswersFinal  Answers = "final"  // the first ballot counts; a later one is already_responded
	AnswersLatest Answers = "latest" // each new ballot replaces the one before, until the poll closes
)

// The marks of an approve ballot, as the JSON spells them.
const (
	Yes     = "yes"
	No      = "no"
	Abstain = "abstain"
)

// Limits of the kinds. A ranked ballot adds to one cell of its poll's
// pairwise matrix per pair of choices it orders, up to n(n-1)/2, so its
// choices are bounded tighter than the others', whose ballots cost one
// figure a choice (BENCHMARKS.md has the cost measured).
const (
	MaxBallotChoices = 64        // choices of a poll of any kind but single
	MaxRankedChoices = 16        // choices of a ranked poll
	MaxScoreLimit    = 1_000_000 // the highest max_score
	MaxBudget        = 1 << 30   // the highest budget
)

// Rules is the ballot part of a poll's definition: its kind, the kind's
// parameters with their defaults filled in, and the answers mode. The zero
// value is not valid; NewRules makes one, and Single is today's polls.
type Rules struct {
	Kind       Kind
	MinChoices int // multiple: the fewest choices a ballot holds (0: an empty ballot abstains)
	MaxChoices int // multiple: the most
	MaxScore   int // score: the highest score of one choice
	Budget     int // score: the most points one ballot spends in all; 0: no budget
	Answers    Answers
}

// Single is the rules of a poll that says nothing of its ballot: one
// choice, the first answer final.
var Single = Rules{Kind: KindSingle, Answers: AnswersFinal}

// IsDefault reports whether r is Single: a poll whose definition leaf and
// votes keep the encoding of the polls that came before kinds.
func (r Rules) IsDefault() bool { return r == Single }

// Spec is a poll's ballot as it was asked for: each parameter nil when not
// given, so that a parameter of another kind can be told from one left out.
// In JSON it is the "ballot" object of a poll's definition; the answers
// mode is a field of the definition beside it.
type Spec struct {
	Kind       string `json:"kind"` // "" is single
	MinChoices *int   `json:"min_choices,omitempty"`
	MaxChoices *int   `json:"max_choices,omitempty"`
	MaxScore   *int   `json:"max_score,omitempty"`
	Budget     *int   `json:"budget,omitempty"`
	Answers    string `json:"-"` // "" is final
}

// RuleError is a definition, or a ballot, that breaks a rule. Field names
// what is wrong as the HTTP API spells it (ballot.kind, ballot.max_choices,
// answers, choices; for a ballot: ballot), Rule is a stable code for it,
// Reason says what is wrong and the limit.
type RuleError struct {
	Field  string
	Rule   string
	Reason string
}

func (e *RuleError) Error() string { return e.Reason }

// The Rule codes of a ballot's RuleError.
const (
	RuleUnknownChoice = "unknown_choice" // a choice the poll does not have
	RuleTwice         = "choice_twice"   // a choice given twice
	RuleTooFew        = "too_few"        // fewer choices than min_choices (ranked: none)
	RuleTooMany       = "too_many"       // more than max_choices
	RuleOverMaxScore  = "over_max_score" // a score above max_score
	RuleOverBudget    = "over_budget"    // scores summing above the budget
	RuleKind          = "kind"           // a definition's kind or one of its parameters
)

func ruleErr(field, rule, format string, args ...any) *RuleError {
	return &RuleError{Field: field, Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

// NewRules checks spec for a poll of nChoices choices and fills in the
// defaults (min_choices 1, max_choices every choice). Its error is a
// *RuleError naming the field: an unknown kind or answers mode, a
// parameter of another kind, min above max, max_score or budget out of
// range, more choices than the kind takes.
func NewRules(spec Spec, nChoices int) (Rules, error) {
	r := Rules{Kind: Kind(spec.Kind), Answers: Answers(spec.Answers)}
	if r.Kind == "" {
		r.Kind = KindSingle
	}
	if r.Answers == "" {
		r.Answers = AnswersFinal
	}
	if r.Answers != AnswersFinal && r.Answers != AnswersLatest {
		return Rules{}, ruleErr("answers", RuleKind, "answers %q is not known: it is %q (the first ballot counts) or %q (each new ballot replaces the one before until the poll closes)", spec.Answers, AnswersFinal, AnswersLatest)
	}
	if !slices.Contains(Kinds, r.Kind) {
		return Rules{}, ruleErr("ballot.kind", RuleKind, "ballot kind %q is not known: it is one of %s", spec.Kind, kindList())
	}
	params := []struct {
		name  string
		v     *int
		kinds []Kind
	}{
		{"min_choices", spec.MinChoices, []Kind{KindMultiple}},
		{"max_choices", spec.MaxChoices, []Kind{KindMultiple}},
		{"max_score", spec.MaxScore, []Kind{KindScore}},
		{"budget", spec.Budget, []Kind{KindScore}},
	}
	for _, p := range params {
		if p.v != nil && !slices.Contains(p.kinds, r.Kind) {
			return Rules{}, ruleErr("ballot."+p.name, RuleKind, "%s is a parameter of %s ballots, not of %s ones: leave it out", p.name, p.kinds[0], r.Kind)
		}
	}
	if r.Kind != KindSingle && nChoices > MaxBallotChoices {
		return Rules{}, ruleErr("choices", RuleKind, "%d choices; a %s poll has at most %d", nChoices, r.Kind, MaxBallotChoices)
	}
	switch r.Kind {
	case KindMultiple:
		return multipleRules(r, spec, nChoices)
	case KindScore:
		return scoreRules(r, spec)
	case KindRanked:
		if nChoices > MaxRankedChoices {
			return Rules{}, ruleErr("choices", RuleKind, "%d choices; a ranked poll has at most %d", nChoices, MaxRankedChoices)
		}
	}
	return r, nil
}

// multipleRules gives r, a multiple ballot's rules, spec's limits on how
// many choices a ballot holds, or says which makes no sense.
func multipleRules(r Rules, spec Spec, nChoices int) (Rules, error) {
	r.MinChoices, r.MaxChoices = 1, nChoices
	if spec.MinChoices != nil {
		r.MinChoices = *spec.MinChoices
	}
	if spec.MaxChoices != nil {
		r.MaxChoices = *spec.MaxChoices
	}
	switch {
	case r.MinChoices < 0:
		return Rules{}, ruleErr("ballot.min_choices", RuleKind, "min_choices is %d; it is 0 (an empty ballot abstains) or more", r.MinChoices)
	case r.MaxChoices < 1:
		return Rules{}, ruleErr("ballot.max_choices", RuleKind, "max_choices is %d; a ballot must be able to hold at least 1 choice", r.MaxChoices)
	case r.MaxChoices > nChoices:
		return Rules{}, ruleErr("ballot.max_choices", RuleKind, "max_choices is %d, more than the poll's %d choices", r.MaxChoices, nChoices)
	case r.MinChoices > r.MaxChoices:
		return Rules{}, ruleErr("ballot.min_choices", RuleKind, "min_choices (%d) is above max_choices (%d)", r.MinChoices, r.MaxChoices)
	}
	return r, nil
}

// scoreRules gives r, a score ballot's rules, spec's highest score and
// budget, or says which makes no sense.
func scoreRules(r Rules, spec Spec) (Rules, error) {
	if spec.MaxScore == nil {
		return Rules{}, ruleErr("ballot.max_score", RuleKind, "a score ballot needs max_score, the highest score of one choice (1 to %d)", MaxScoreLimit)
	}
	r.MaxScore = *spec.MaxScore
	if r.MaxScore < 1 || r.MaxScore > MaxScoreLimit {
		return Rules{}, ruleErr("ballot.max_score", RuleKind, "max_score is %d; it is 1 to %d", r.MaxScore, MaxScoreLimit)
	}
	if spec.Budget != nil {
		r.Budget = *spec.Budget
		if r.Budget < 1 || r.Budget > MaxBudget {
			return Rules{}, ruleErr("ballot.budget", RuleKind, "budget is %d; it is 1 to %d points a ballot (leave it out for no budget)", r.Budget, MaxBudget)
		}
	}
	return r, nil
}

// Spec is r as it would be asked for, every parameter of its kind given:
// NewRules(r.Spec(), n) is r again for a poll of n choices r fits.
func (r Rules) Spec() Spec {
	s := Spec{Kind: string(r.Kind), Answers: string(r.Answers)}
	switch r.Kind {
	case KindMultiple:
		s.MinChoices, s.MaxChoices = &r.MinChoices, &r.MaxChoices
	case KindScore:
		s.MaxScore = &r.MaxScore
		if r.Budget > 0 {
			s.Budget = &r.Budget
		}
	}
	return s
}

// String says r in words: "multiple, 1 to 2 choices, answers final".
func (r Rules) String() string {
	s := string(r.Kind)
	switch r.Kind {
	case KindMultiple:
		s += fmt.Sprintf(", %d to %d choices", r.MinChoices, r.MaxChoices)
	case KindScore:
		s += fmt.Sprintf(", 0 to %d a choice", r.MaxScore)
		if r.Budget > 0 {
			s += fmt.Sprintf(", at most %d in all", r.Budget)
		}
	}
	return s + ", answers " + string(r.Answers)
}

func kindList() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = strconv.Quote(string(k))
	}
	return strings.Join(s, ", ")
}

// Check reports the first rule of r that b, a ballot for a poll with these
// choices, breaks, as a *RuleError whose reason names the rule and the
// limit; nil if it breaks none. b's kind must be r's. It allocates
// nothing unless b breaks a rule: the ledger checks every ballot it
// appends.
func (r Rules) Check(choices []string, b Ballot) error {
	if b.Kind != r.Kind {
		return ruleErr("ballot", RuleKind, "a %s ballot for a %s poll", b.Kind, r.Kind)
	}
	n := b.numNamed()
	var seen uint64 // the positions below 64 named so far
	for j := range n {
		c := b.namedAt(j)
		i := slices.Index(choices, c)
		if i < 0 {
			return ruleErr("ballot", RuleUnknownChoice, "choice %q is not one of the poll's choices", c)
		}
		if i < 64 && seen&(1<<i) != 0 || i >= 64 && b.namesBefore(c, j) {
			return ruleErr("ballot", RuleTwice, "choice %q is given twice: a ballot names each choice at most once", c)
		}
		if i < 64 {
			seen |= 1 << i
		}
	}
	switch r.Kind {
	case KindMultiple:
		if n < r.MinChoices {
			return ruleErr("ballot", RuleTooFew, "the ballot holds %d choices; this poll takes at least %d", n, r.MinChoices)
		}
		if n > r.MaxChoices {
			return ruleErr("ballot", RuleTooMany, "the ballot holds %d choices; this poll takes at most %d", n, r.MaxChoices)
		}
	case KindRanked:
		if n == 0 {
			return ruleErr("ballot", RuleTooFew, "the ballot ranks no choice; rank at least one, most preferred first")
		}
	case KindScore:
		sum := 0
		for _, m := range b.Marks {
			if m.Value > r.MaxScore {
				return ruleErr("ballot", RuleOverMaxScore, "choice %q is scored %d; this poll's max_score is %d", m.Choice, m.Value, r.MaxScore)
			}
			sum += m.Value
		}
		if r.Budget > 0 && sum > r.Budget {
			return ruleErr("ballot", RuleOverBudget, "the ballot spends %d points; this poll's budget is %d", sum, r.Budget)
		}
	}
	return nil
}
