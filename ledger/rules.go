package ledger

import "tally/vote"

// This file keeps a poll's ballot rules (vote.Rules) in its columns: polls'
// and poll_definitions' ballot_kind, min_choices, max_choices, max_score,
// budget and answers (migration 00013), NULL for a parameter its kind
// does not take and for no budget.

// rulesColsP and rulesColsD are the rules' columns of polls p and of
// poll_definitions d, in the order rulesRow.targets scans them.
const (
	rulesColsP = `p.ballot_kind, p.min_choices, p.max_choices, p.max_score, p.budget, p.answers`
	rulesColsD = `d.ballot_kind, d.min_choices, d.max_choices, d.max_score, d.budget, d.answers`
)

// rulesRow is the rules' columns as scanned; every field nil where the
// row is not a definition.
type rulesRow struct {
	kind, answers              *string
	min, max, maxScore, budget *int
}

func (r *rulesRow) targets() []any {
	return []any{&r.kind, &r.min, &r.max, &r.maxScore, &r.budget, &r.answers}
}

func (r rulesRow) rules() vote.Rules {
	if r.kind == nil {
		return vote.Single
	}
	out := vote.Rules{Kind: vote.Kind(*r.kind), Answers: vote.AnswersFinal}
	if r.answers != nil {
		out.Answers = vote.Answers(*r.answers)
	}
	for _, f := range []struct {
		dst *int
		src *int
	}{{&out.MinChoices, r.min}, {&out.MaxChoices, r.max}, {&out.MaxScore, r.maxScore}, {&out.Budget, r.budget}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return out
}

// rulesArgs are r as the arguments of the rules' columns, in their order.
func rulesArgs(r vote.Rules) []any {
	orNull := func(v int, kind vote.Kind) *int {
		if r.Kind != kind || v == 0 && !(kind == vote.KindMultiple) {
			return nil
		}
		return &v
	}
	return []any{string(r.Kind), orNull(r.MinChoices, vote.KindMultiple), orNull(r.MaxChoices, vote.KindMultiple),
		orNull(r.MaxScore, vote.KindScore), orNull(r.Budget, vote.KindScore), string(r.Answers)}
}
