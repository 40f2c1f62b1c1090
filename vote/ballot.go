package vote

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// This file owns what a ballot is: the kinds a poll may ask for (Rules,
// fixed when the poll is created), a ballot's value read from JSON
// (ParseBallot), its canonical form (Ballot.Canonical, the text the stream
// carries, the ledger stores, the fingerprint binds and the log commits),
// and the check of a ballot against its poll (Rules.Check). Count, in
// count.go, folds ballots into a poll's figures.
//
// A single-choice ballot's canonical form is its choice id, so a vote of
// today's body ({"candidate_id":"a"}) and {"ballot":"a"} are one vote with
// one fingerprint. Every other canonical form is compact JSON: an array of
// ids ("multiple" sorted in byte order, "ranked" in order of preference) or
// an object whose keys, the choices marked, are in byte order ("approve":
// "yes", "no" or "abstain"; "score": an integer). Ids need no escaping in
// JSON, and a canonical form that starts with '[' or '{' is never an id,
// so the two never meet.

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
	case KindScore:
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
	case KindRanked:
		if nChoices > MaxRankedChoices {
			return Rules{}, ruleErr("choices", RuleKind, "%d choices; a ranked poll has at most %d", nChoices, MaxRankedChoices)
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

// Ballot is one ballot's value. Choices holds a single, multiple or ranked
// ballot's choices (multiple: in byte order once parsed; ranked: most
// preferred first); Marks an approve or score ballot's, in byte order of
// their choices.
type Ballot struct {
	Kind    Kind
	Choices []string
	Marks   []Mark
}

// Mark is one choice of an approve or score ballot: Value is the score, or
// for approve one of ApproveYes, ApproveNo, ApproveAbstain.
type Mark struct {
	Choice string
	Value  int
}

// The values of an approve Mark.
const (
	ApproveYes = iota
	ApproveNo
	ApproveAbstain
)

var approveWords = [...]string{ApproveYes: Yes, ApproveNo: No, ApproveAbstain: Abstain}

// ShapeError is a ballot whose JSON is not the shape its kind takes: the
// request is wrong, whatever the poll (HTTP 400).
type ShapeError struct{ Reason string }

func (e *ShapeError) Error() string { return e.Reason }

func shapeErr(format string, args ...any) error {
	return &ShapeError{Reason: fmt.Sprintf(format, args...)}
}

// Shape says in words what a ballot of kind k looks like in JSON.
func Shape(k Kind) string {
	switch k {
	case KindMultiple:
		return `an array of choice ids, ["a","c"]`
	case KindApprove:
		return `an object of choice ids to "yes", "no" or "abstain", {"a":"yes","b":"no"}`
	case KindScore:
		return `an object of choice ids to whole-number scores, {"a":3,"b":0}`
	case KindRanked:
		return `an array of choice ids, most preferred first, ["c","a","b"]`
	}
	return `one choice id, "a"`
}

// ParseBallot reads a ballot of kind k from one JSON value, spelled any way
// JSON allows. It refuses, with a *ShapeError, what is not the kind's
// shape: another JSON type, an id outside the id rule, a key twice, a mark
// other than yes/no/abstain, a score that is not a whole number, anything
// after the value. It does not check the ballot against its poll: that is
// Rules.Check. Choices and marks come back in canonical order.
func ParseBallot(k Kind, raw []byte) (Ballot, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	b := Ballot{Kind: k}
	var err error
	switch k {
	case KindSingle:
		var s string
		s, err = stringToken(dec, k)
		b.Choices = []string{s}
	case KindMultiple, KindRanked:
		b.Choices, err = parseIDArray(dec, k)
	case KindApprove, KindScore:
		b.Marks, err = parseMarks(dec, k)
	default:
		return Ballot{}, shapeErr("ballot kind %q is not known", k)
	}
	if err != nil {
		return Ballot{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Ballot{}, shapeErr("the ballot goes on after its value: send %s", Shape(k))
	}
	b.sort()
	return b, nil
}

func (b *Ballot) sort() {
	if b.Kind == KindMultiple {
		slices.Sort(b.Choices)
	}
	slices.SortFunc(b.Marks, func(x, y Mark) int { return strings.Compare(x.Choice, y.Choice) })
}

func stringToken(dec *json.Decoder, k Kind) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", shapeErr("the ballot is not valid JSON: send %s", Shape(k))
	}
	s, ok := tok.(string)
	if !ok {
		return "", shapeErr("the ballot holds %s where a choice id goes: send %s", tokenKind(tok), Shape(k))
	}
	if !ValidID(s) {
		return "", shapeErr("the ballot's choice %s is not an id: choice ids are %s", quoteShort(s), IDRule)
	}
	return s, nil
}

func parseIDArray(dec *json.Decoder, k Kind) ([]string, error) {
	if err := openDelim(dec, '[', k); err != nil {
		return nil, err
	}
	ids := []string{}
	for dec.More() {
		if len(ids) == MaxBallotChoices+1 {
			return nil, shapeErr("the ballot holds more than %d choices", MaxBallotChoices+1)
		}
		s, err := stringToken(dec, k)
		if err != nil {
			return nil, err
		}
		ids = append(ids, s)
	}
	_, err := dec.Token()
	if err != nil {
		return nil, shapeErr("the ballot is not valid JSON: send %s", Shape(k))
	}
	return ids, nil
}

func parseMarks(dec *json.Decoder, k Kind) ([]Mark, error) {
	if err := openDelim(dec, '{', k); err != nil {
		return nil, err
	}
	marks := []Mark{}
	seen := map[string]bool{}
	for dec.More() {
		if len(marks) == MaxBallotChoices+1 {
			return nil, shapeErr("the ballot marks more than %d choices", MaxBallotChoices+1)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, shapeErr("the ballot is not valid JSON: send %s", Shape(k))
		}
		c, _ := tok.(string)
		if !ValidID(c) {
			return nil, shapeErr("the ballot's choice %s is not an id: choice ids are %s", quoteShort(c), IDRule)
		}
		if seen[c] {
			return nil, shapeErr("the ballot marks choice %q twice: give each choice once", c)
		}
		seen[c] = true
		tok, err = dec.Token()
		if err != nil {
			return nil, shapeErr("the ballot is not valid JSON: send %s", Shape(k))
		}
		v, err := markValue(tok, c, k)
		if err != nil {
			return nil, err
		}
		marks = append(marks, Mark{Choice: c, Value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, shapeErr("the ballot is not valid JSON: send %s", Shape(k))
	}
	return marks, nil
}

func markValue(tok json.Token, c string, k Kind) (int, error) {
	if k == KindApprove {
		s, _ := tok.(string)
		if i := slices.Index(approveWords[:], s); i >= 0 {
			return i, nil
		}
		return 0, shapeErr("the ballot marks choice %q with %s: a mark is \"yes\", \"no\" or \"abstain\"", c, tokenKind(tok))
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, shapeErr("the ballot scores choice %q with %s: a score is a whole number", c, tokenKind(tok))
	}
	v, err := strconv.ParseInt(string(n), 10, 32)
	if err != nil {
		return 0, shapeErr("the ballot scores choice %q with %s: a score is a whole number from 0 to the poll's max_score", c, quoteShort(string(n)))
	}
	if v < 0 {
		return 0, shapeErr("the ballot scores choice %q with %d: a score is 0 or more", c, v)
	}
	return int(v), nil
}

func openDelim(dec *json.Decoder, d json.Delim, k Kind) error {
	tok, err := dec.Token()
	if err != nil {
		return shapeErr("the ballot is not valid JSON: send %s", Shape(k))
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return shapeErr("%s ballot is %s, not %s", k.A(), Shape(k), tokenKind(tok))
	}
	return nil
}

func tokenKind(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "an array"
		}
		return "an object"
	case string:
		return "the string " + quoteShort(v)
	case json.Number:
		return "the number " + quoteShort(string(v))
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "a value"
}

func quoteShort(s string) string {
	if len(s) > 70 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}

// Canonical is b's canonical form (this file's doc). b must come from
// ParseBallot or ParseCanonical, which put it in canonical order.
func (b Ballot) Canonical() string {
	if b.Kind == KindSingle {
		return b.Choices[0]
	}
	var sb strings.Builder
	switch b.Kind {
	case KindMultiple, KindRanked:
		sb.WriteByte('[')
		for i, c := range b.Choices {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`"` + c + `"`)
		}
		sb.WriteByte(']')
	default:
		sb.WriteByte('{')
		for i, m := range b.Marks {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`"` + m.Choice + `":`)
			if b.Kind == KindApprove {
				sb.WriteString(`"` + approveWords[m.Value] + `"`)
			} else {
				sb.WriteString(strconv.Itoa(m.Value))
			}
		}
		sb.WriteByte('}')
	}
	return sb.String()
}

// MaxCanonicalLen bounds a canonical ballot, above the longest a vote body
// (4 KiB) can carry. (An approve ballot of 64 choices of 64-byte ids all
// marked abstain would be 63 bytes longer; no vote body can hold it.)
const MaxCanonicalLen = 1 + MaxBallotChoices*(MaxIDLen+3+len(Abstain)+2) + 1

// ParseCanonical reads a ballot of kind k from its canonical form, and
// refuses any other spelling of it.
func ParseCanonical(k Kind, s string) (Ballot, error) {
	if len(s) > MaxCanonicalLen {
		return Ballot{}, shapeErr("a canonical ballot is at most %d bytes, this one %d", MaxCanonicalLen, len(s))
	}
	if k == KindSingle {
		if !ValidID(s) {
			return Ballot{}, shapeErr("a single-choice ballot is a choice id (%s), not %s", IDRule, quoteShort(s))
		}
		return Ballot{Kind: k, Choices: []string{s}}, nil
	}
	if b, ok := scanCanonical(k, s); ok {
		return b, nil
	}
	b, err := ParseBallot(k, []byte(s))
	if err != nil {
		return Ballot{}, err
	}
	if b.Canonical() != s {
		return Ballot{}, shapeErr("the ballot %s is not in canonical form: it is %s", quoteShort(s), quoteShort(b.Canonical()))
	}
	return b, nil
}

// ValidCanonical reports whether s is the canonical form of a ballot of
// some kind: what the stream can check of an entry without its poll.
func ValidCanonical(s string) bool {
	if ValidID(s) {
		return true
	}
	if len(s) > MaxCanonicalLen {
		return false
	}
	for _, k := range []Kind{KindRanked, KindApprove, KindScore} { // ranked takes every array multiple does
		if _, ok := scanCanonical(k, s); ok {
			return true
		}
	}
	for _, k := range Kinds[1:] {
		if _, err := ParseCanonical(k, s); err == nil {
			return true
		}
	}
	return false
}

// Check reports the first rule of r that b, a ballot for a poll with these
// choices, breaks, as a *RuleError whose reason names the rule and the
// limit; nil if it breaks none. b's kind must be r's.
func (r Rules) Check(choices []string, b Ballot) error {
	if b.Kind != r.Kind {
		return ruleErr("ballot", RuleKind, "a %s ballot for a %s poll", b.Kind, r.Kind)
	}
	ids := b.Choices
	if len(b.Marks) > 0 {
		ids = make([]string, len(b.Marks))
		for i, m := range b.Marks {
			ids[i] = m.Choice
		}
	}
	seen := make(map[string]bool, len(ids))
	for _, c := range ids {
		if !slices.Contains(choices, c) {
			return ruleErr("ballot", RuleUnknownChoice, "choice %q is not one of the poll's choices", c)
		}
		if seen[c] {
			return ruleErr("ballot", RuleTwice, "choice %q is given twice: a ballot names each choice at most once", c)
		}
		seen[c] = true
	}
	switch r.Kind {
	case KindMultiple:
		if len(ids) < r.MinChoices {
			return ruleErr("ballot", RuleTooFew, "the ballot holds %d choices; this poll takes at least %d", len(ids), r.MinChoices)
		}
		if len(ids) > r.MaxChoices {
			return ruleErr("ballot", RuleTooMany, "the ballot holds %d choices; this poll takes at most %d", len(ids), r.MaxChoices)
		}
	case KindRanked:
		if len(ids) == 0 {
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
