package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"tally/audit"
	"tally/vote"
)

// This file owns the repeat of a poll's creation: a client that did not
// hear the answer to its create sends it again, and must learn that its
// poll exists as it asked, not that "a poll" exists.

// DefinitionConflict is the error of EnsurePoll when a poll of that id
// exists with another definition. It wraps ErrExists.
type DefinitionConflict struct {
	PollID string
	// Field is the first field of the request that differs from the
	// poll's: title, choices, opens_at, closes_at, eligible or
	// public_results.
	Field string
}

func (e *DefinitionConflict) Error() string {
	return fmt.Sprintf("poll %s already exists with another %s", e.PollID, e.Field)
}

func (e *DefinitionConflict) Unwrap() error { return ErrExists }

// EnsurePoll creates p as CreatePoll does, or finds it created: when a
// poll of p's id exists and was created with p's definition it returns
// false and no error, else a *DefinitionConflict. A zero OpensAt (open
// now) matches any opening time. The definition compared is the poll's
// first in its log, so that a poll closed since still matches the
// request that created it.
func (s *Store) EnsurePoll(ctx context.Context, p Poll) (created bool, err error) {
	err = s.CreatePoll(ctx, p)
	if !errors.Is(err, ErrExists) {
		return err == nil, err
	}
	first, err := s.firstDefinition(ctx, p.ID)
	if err != nil {
		return false, err
	}
	if field := first.differs(p); field != "" {
		return false, &DefinitionConflict{PollID: p.ID, Field: field}
	}
	return false, nil
}

// createdPoll is what a poll was created as: its first definition and
// whether its results are public.
type createdPoll struct {
	def           audit.Definition
	publicResults bool
}

// firstDefinition reads what poll id was created as. A poll created before
// definitions were logged has none: its catalog row stands for it.
func (s *Store) firstDefinition(ctx context.Context, id string) (createdPoll, error) {
	c := createdPoll{def: audit.Definition{PollID: id}}
	var logged bool
	var hash []byte
	var eligibility string
	var eligible []string
	var rr rulesRow
	err := s.pool.QueryRow(ctx, `
SELECT d.id IS NOT NULL, coalesce(d.title, p.title), coalesce(d.opens_at, p.opens_at), `+rulesColsP+`,
       CASE WHEN d.id IS NULL THEN p.closes_at ELSE d.closes_at END, d.eligible_hash,
       coalesce(d.choices, (SELECT array_agg(c.candidate_id ORDER BY c.position) FROM poll_choices c WHERE c.poll_id = p.id)),
       p.public_results, p.eligibility,
       coalesce((SELECT array_agg(e.principal_id) FROM poll_eligible e WHERE e.poll_id = p.id), '{}')
FROM polls p
LEFT JOIN LATERAL (SELECT * FROM poll_definitions d WHERE d.poll_id = p.id ORDER BY d.id LIMIT 1) d ON true
WHERE p.id = $1`, id).Scan(append(append([]any{&logged, &c.def.Title, &c.def.OpensAt}, rr.targets()...), &c.def.ClosesAt, &hash, &c.def.Choices,
		&c.publicResults, &eligibility, &eligible)...)
	c.def.Rules = rr.rules()
	if err != nil {
		return createdPoll{}, interpretError("read poll "+id, err)
	}
	switch {
	case hash != nil:
		var h [32]byte
		copy(h[:], hash)
		c.def.EligibleHash = &h
	case !logged && eligibility == EligibleList:
		h := audit.EligibleListHash(eligible)
		c.def.EligibleHash = &h
	}
	return c, nil
}

// differs names the first field of p its creation did not ask for, or "".
func (c createdPoll) differs(p Poll) string {
	d := c.def
	switch {
	case d.Title != p.Title:
		return "title"
	case !slices.Equal(d.Choices, p.Choices):
		return "choices"
	case !sameBallot(d.Rules, p.BallotRules()):
		return "ballot"
	case d.Rules.Answers != p.BallotRules().Answers:
		return "answers"
	case !p.OpensAt.IsZero() && !d.OpensAt.Equal(p.OpensAt):
		return "opens_at"
	case !sameTime(d.ClosesAt, p.ClosesAt):
		return "closes_at"
	case !sameEligible(d.EligibleHash, p.Eligible):
		return "eligible"
	case c.publicResults != p.PublicResults:
		return "public_results"
	}
	return ""
}

// sameBallot reports whether a and b ask for the same ballot, whatever
// their answers modes.
func sameBallot(a, b vote.Rules) bool {
	a.Answers, b.Answers = "", ""
	return a == b
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

func sameEligible(hash *[32]byte, eligible []string) bool {
	if hash == nil || len(eligible) == 0 {
		return hash == nil && len(eligible) == 0
	}
	want := audit.EligibleListHash(eligible)
	return bytes.Equal(hash[:], want[:])
}
