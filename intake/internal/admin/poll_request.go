package admin

import (
	"encoding/json"
	"fmt"
	"reflect"

	"tally/audit"
	"tally/ledger"
	"tally/vote"
)

// This file owns the body of POST /v1/polls as a poll: its shape
// (pollRequest, pollShape), a title read strictly, the ballot asked for
// made into rules, and ParsePoll, the same reading for tally poll create
// --from.

// pollRequest is the body of POST /v1/polls.
type pollRequest struct {
	PollID        string    `json:"poll_id"`
	Title         pollTitle `json:"title"`
	Choices       []string  `json:"choices"`
	OpensAt       *string   `json:"opens_at"`
	ClosesAt      *string   `json:"closes_at"`
	Eligible      []string  `json:"eligible"`
	PublicResults bool      `json:"public_results"`
	// Ballot and Answers are the poll's ballot kind with its parameters
	// and its answers mode (vote.Spec); left out, a single choice and
	// final.
	Ballot  *ballotSpec `json:"ballot"`
	Answers string      `json:"answers"`
}

// pollTitle is a poll's title as POST /v1/polls reads it: a JSON string
// whose text every JSON reader decodes to the same bytes
// (audit.CheckJSONString), since the title is part of the poll's
// definition leaf. A byte that is not UTF-8 or an escaped lone surrogate
// is refused, naming the field, rather than replaced with U+FFFD.
type pollTitle string

func (t *pollTitle) UnmarshalJSON(raw []byte) error {
	if len(raw) == 0 || raw[0] != '"' {
		return &json.UnmarshalTypeError{Value: jsonKind(raw), Type: reflect.TypeFor[string](), Field: "title"}
	}
	if err := audit.CheckJSONString(raw); err != nil {
		return fmt.Errorf(`"title" %v: the title is part of the poll's definition, which readers must all read alike; write it in UTF-8`, err)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	*t = pollTitle(s)
	return nil
}

// jsonKind names the kind of the JSON value raw, as encoding/json's type
// errors do.
func jsonKind(raw []byte) string {
	switch {
	case len(raw) == 0:
		return "nothing"
	case raw[0] == '{':
		return "object"
	case raw[0] == '[':
		return "array"
	case raw[0] == 't' || raw[0] == 'f':
		return "bool"
	case raw[0] == 'n':
		return "null"
	}
	return "number"
}

// ballotSpec is a poll's ballot as POST /v1/polls takes it and the poll
// routes answer it: its kind and the kind's parameters, each absent
// (nil) when not given, so that a parameter of another kind is refused
// rather than ignored.
type ballotSpec struct {
	Kind       string `json:"kind"`
	MinChoices *int   `json:"min_choices,omitempty"`
	MaxChoices *int   `json:"max_choices,omitempty"`
	MaxScore   *int   `json:"max_score,omitempty"`
	Budget     *int   `json:"budget,omitempty"`
}

const pollShape = `{"poll_id", "title", "choices": [candidate ids], and optionally "opens_at", "closes_at" (RFC 3339), ` +
	`"eligible": [principal ids], "public_results": true, "ballot": {"kind": "single", "multiple" (with "min_choices", ` +
	`"max_choices"), "approve", "score" (with "max_score", "budget") or "ranked"}, "answers": "final" or "latest"}`

// rules are the poll's ballot rules of the request (vote.NewRules), or a
// *vote.RuleError naming the field at fault. Without choices there are no
// rules to check yet: the ledger refuses the choices themselves.
func (q pollRequest) rules() (vote.Rules, error) {
	spec := vote.Spec{Answers: q.Answers}
	if q.Ballot != nil {
		if q.Ballot.Kind == "" {
			return vote.Rules{}, &vote.RuleError{Field: "ballot.kind", Rule: vote.RuleKind,
				Reason: `the ballot has no kind: give "kind", one of "single", "multiple", "approve", "score" or "ranked" (or leave out "ballot" for a single choice)`}
		}
		spec.Kind, spec.MinChoices, spec.MaxChoices = q.Ballot.Kind, q.Ballot.MinChoices, q.Ballot.MaxChoices
		spec.MaxScore, spec.Budget = q.Ballot.MaxScore, q.Ballot.Budget
	}
	if len(q.Choices) == 0 {
		return vote.Single, nil
	}
	return vote.NewRules(spec, len(q.Choices))
}

// poll is the ledger's poll of the request.
func (q pollRequest) poll() (ledger.Poll, error) {
	rules, err := q.rules()
	if err != nil {
		return ledger.Poll{}, err
	}
	p := ledger.Poll{ID: q.PollID, Title: string(q.Title), Choices: q.Choices, Eligible: q.Eligible, PublicResults: q.PublicResults, Rules: rules}
	opens, err := parseTimeField("opens_at", q.OpensAt)
	if err != nil {
		return ledger.Poll{}, err
	}
	if opens != nil {
		p.OpensAt = *opens
	}
	p.ClosesAt, err = parseTimeField("closes_at", q.ClosesAt)
	return p, err
}

// ParsePoll reads one poll as POST /v1/polls reads its body, strictly
// (no unknown key, no key twice, nothing after the object), for tally
// poll create --from. Its error says what is wrong: a *vote.RuleError or
// *ledger.FieldError names the field. The poll's ID is set when the body
// gave one, even with an error.
func ParsePoll(body []byte) (ledger.Poll, error) {
	var q pollRequest
	if err := decodeStrict(body, &q); err != nil {
		return ledger.Poll{ID: q.PollID}, fmt.Errorf("%w: send %s", err, pollShape)
	}
	p, err := q.poll()
	if err != nil {
		return ledger.Poll{ID: q.PollID}, err
	}
	return p, nil
}
