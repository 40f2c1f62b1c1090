package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
)

// This file writes a poll's definition into its log (migration 00011,
// docs/audit.md "The definition leaf"): CreatePoll and ClosePoll append
// it in their transaction, under the poll's head lock. An append decides
// its votes on the windows it read before it takes that lock; its write
// of the logs (writeLogsSQL, a statement after the lock, which sees any
// close that committed meanwhile) checks its votes' received_at against
// the windows as they then stand, and writes no head when one is outside
// (errRedefined): so each vote's leaf follows a definition that takes it.

// errRedefined: a poll's window changed (tally poll close) between the
// reading of an append's facts and the lock of its log head, and a vote
// the batch recorded is outside it: the batch runs again.
var errRedefined = errors.New("a poll's window changed while the batch was decided")

// definitionSQL reads a poll's definition as the catalog now holds it.
const definitionSQL = `
SELECT p.title, p.opens_at, p.closes_at, p.eligibility, ` + rulesColsP + `,
       coalesce((SELECT array_agg(c.candidate_id ORDER BY c.position) FROM poll_choices c WHERE c.poll_id = p.id), '{}'),
       coalesce((SELECT array_agg(e.principal_id) FROM poll_eligible e WHERE e.poll_id = p.id), '{}')
FROM polls p WHERE p.id = $1`

// appendDefinition writes poll's definition, as the catalog holds it in
// tx, as the next leaf of its log. tx must hold the poll's head (h).
func appendDefinition(ctx context.Context, tx pgx.Tx, poll string, h *logHead) error {
	what := "log the definition of poll " + poll
	d := audit.Definition{PollID: poll}
	var eligibility string
	var eligible []string
	var rr rulesRow
	targets := append(append([]any{&d.Title, &d.OpensAt, &d.ClosesAt, &eligibility}, rr.targets()...), &d.Choices, &eligible)
	if err := tx.QueryRow(ctx, definitionSQL, poll).Scan(targets...); err != nil {
		return interpretError(what, err)
	}
	d.Rules = rr.rules()
	if eligibility == EligibleList {
		hash := audit.EligibleListHash(eligible)
		d.EligibleHash = &hash
	}
	leaf, err := audit.DefinitionHash(d)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !h.built {
		if err := buildLog(ctx, tx, poll, h, 0); err != nil {
			return err
		}
	}
	var id int64
	var hash []byte
	if d.EligibleHash != nil {
		hash = d.EligibleHash[:]
	}
	if err := tx.QueryRow(ctx, `
INSERT INTO poll_definitions (poll_id, title, opens_at, closes_at, eligible_hash, choices,
                              ballot_kind, min_choices, max_choices, max_score, budget, answers)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id`,
		append([]any{poll, d.Title, d.OpensAt, d.ClosesAt, hash, d.Choices}, rulesArgs(d.Rules)...)...).Scan(&id); err != nil {
		return interpretError(what, err)
	}
	next, full, err := h.state.extend([]tlog.Hash{leaf})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var w logWrites
	w.addLeaves(poll, h.state.size, []int64{-id})
	w.add(poll, next, full)
	if err := w.exec(ctx, tx, what); err != nil {
		return err
	}
	h.state = next
	return nil
}

// lockHead locks and reads one poll's head: ErrNotFound when the poll
// has none.
func lockHead(ctx context.Context, tx pgx.Tx, poll string) (*logHead, error) {
	heads, err := lockHeads(ctx, tx, []string{poll})
	if err != nil {
		return nil, err
	}
	if heads[poll] == nil {
		return nil, fmt.Errorf("poll %s: %w", poll, ErrNotFound)
	}
	return heads[poll], nil
}
