package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
	"tally/vote"
)

// This file owns the creation of many polls at once: an import of a list
// of definitions, or an application that sets up its polls in bulk. One
// transaction makes them all, with a few statements whatever their
// number, and each poll gets the answer EnsurePoll gives it alone.

// MaxPollsPerCreate bounds the polls one EnsurePolls takes.
const MaxPollsPerCreate = 1000

// PollOutcome is what EnsurePolls did with one poll.
type PollOutcome struct {
	// Created: the poll was made. Else, when Err is nil, it existed with
	// this definition already.
	Created bool
	// Err is the poll's own refusal: a *FieldError (nothing made) or a
	// *DefinitionConflict (it exists with another definition).
	Err error
}

// EnsurePolls does what EnsurePoll does for each of ps, the new polls in
// one transaction, and returns one outcome per poll, in the order of ps.
// A poll whose id an earlier poll of ps has is compared with that one as
// with one that existed. Its error is for the whole batch (PostgreSQL did
// not answer, more than MaxPollsPerCreate polls): then nothing was made.
func (s *Store) EnsurePolls(ctx context.Context, ps []Poll) ([]PollOutcome, error) {
	if len(ps) == 0 || len(ps) > MaxPollsPerCreate {
		return nil, &FieldError{Op: "create polls", Field: "polls", Reason: fmt.Sprintf("give 1-%d polls, not %d", MaxPollsPerCreate, len(ps))}
	}
	out := make([]PollOutcome, len(ps))
	var valid []int // of ps
	for i, p := range ps {
		if err := p.validateNew(); err != nil {
			out[i].Err = err
			continue
		}
		valid = append(valid, i)
	}
	var made map[string]int // poll id -> its index in ps
	err := s.adminTx(ctx, "create polls", func(tx pgx.Tx) error {
		var err error
		made, err = createPolls(ctx, tx, ps, valid)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, i := range valid {
		if j, ok := made[ps[i].ID]; ok && j == i {
			out[i].Created = true
			continue
		}
		first, err := s.firstDefinition(ctx, ps[i].ID)
		if err != nil {
			return nil, err
		}
		if field := first.differs(ps[i]); field != "" {
			out[i].Err = &DefinitionConflict{PollID: ps[i].ID, Field: field}
		}
	}
	return out, nil
}

// createPolls makes, in tx, the polls of ps at valid whose ids no poll
// has (the first of each id), and returns them by id. A poll another
// transaction made meanwhile fails the statement: the transaction is
// tried again (errRaced), and finds it.
func createPolls(ctx context.Context, tx pgx.Tx, ps []Poll, valid []int) (map[string]int, error) {
	ids := make([]string, len(valid))
	for k, i := range valid {
		ids[k] = ps[i].ID
	}
	rows, err := tx.Query(ctx, `SELECT id FROM polls WHERE id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, err
	}
	existing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	made := map[string]int{}
	for _, id := range existing {
		made[id] = -1
	}
	var c bulkCreate
	for _, i := range valid {
		if _, ok := made[ps[i].ID]; ok {
			continue
		}
		made[ps[i].ID] = i
		c.add(ps[i])
	}
	for id, i := range made {
		if i < 0 {
			delete(made, id)
		}
	}
	if len(made) == 0 {
		return made, nil
	}
	if err := c.insert(ctx, tx); err != nil {
		if errors.Is(interpretError("", err), ErrExists) {
			return nil, errRaced
		}
		return nil, err
	}
	return made, c.appendDefinitions(ctx, tx)
}

// bulkCreate is the polls to make, as the arrays of the statements that
// make them.
type bulkCreate struct {
	ids, titles, eligibility, kinds, answers []string
	opens, closes                            []*time.Time
	public                                   []bool
	min, max, maxScore, budget               []*int
	choicePolls, choices                     []string
	positions                                []int
	eligiblePolls, eligible                  []string
	figures                                  []Poll // polls of another ballot than the default
}

func (c *bulkCreate) add(p Poll) {
	eligibility := EligibleAny
	if len(p.Eligible) > 0 {
		eligibility = EligibleList
	}
	var opens *time.Time
	if !p.OpensAt.IsZero() {
		opens = &p.OpensAt
	}
	c.ids, c.titles, c.eligibility = append(c.ids, p.ID), append(c.titles, p.Title), append(c.eligibility, eligibility)
	c.opens, c.closes, c.public = append(c.opens, opens), append(c.closes, p.ClosesAt), append(c.public, p.PublicResults)
	r := rulesArgs(p.BallotRules())
	c.kinds, c.answers = append(c.kinds, r[0].(string)), append(c.answers, r[5].(string))
	c.min, c.max = append(c.min, r[1].(*int)), append(c.max, r[2].(*int))
	c.maxScore, c.budget = append(c.maxScore, r[3].(*int)), append(c.budget, r[4].(*int))
	for k, ch := range p.Choices {
		c.choicePolls, c.choices, c.positions = append(c.choicePolls, p.ID), append(c.choices, ch), append(c.positions, k+1)
	}
	for _, e := range p.Eligible {
		c.eligiblePolls, c.eligible = append(c.eligiblePolls, p.ID), append(c.eligible, e)
	}
	if !p.BallotRules().IsDefault() {
		c.figures = append(c.figures, p)
	}
}

// The statements of bulkCreate.insert: CreatePoll's, for many polls.
const (
	bulkPollsSQL = `
INSERT INTO polls (id, title, opens_at, closes_at, eligibility, public_results,
                   ballot_kind, min_choices, max_choices, max_score, budget, answers)
SELECT id, title, coalesce(opens, now()), closes, eligibility, public, kind, mn, mx, ms, bu, an
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::text[], $6::bool[],
            $7::text[], $8::int[], $9::int[], $10::int[], $11::int[], $12::text[])
     AS t(id, title, opens, closes, eligibility, public, kind, mn, mx, ms, bu, an)`
	bulkChoicesSQL = `
INSERT INTO poll_choices (poll_id, candidate_id, position)
SELECT * FROM unnest($1::text[], $2::text[], $3::int[])`
	bulkZeroResultsSQL = `
INSERT INTO poll_results (poll_id, candidate_id, vote_count)
SELECT p, c, 0 FROM unnest($1::text[], $2::text[]) AS t(p, c)
ON CONFLICT DO NOTHING`
	bulkEligibleSQL = `
INSERT INTO poll_eligible (poll_id, principal_id)
SELECT DISTINCT p, e FROM unnest($1::text[], $2::text[]) AS t(p, e)`
)

// insert writes the polls' rows: what CreatePoll writes before the
// definition.
func (c *bulkCreate) insert(ctx context.Context, tx pgx.Tx) error {
	b := &pgx.Batch{}
	b.Queue(bulkPollsSQL, c.ids, c.titles, c.opens, c.closes, c.eligibility, c.public,
		c.kinds, c.min, c.max, c.maxScore, c.budget, c.answers)
	b.Queue(bulkChoicesSQL, c.choicePolls, c.choices, c.positions)
	b.Queue(bulkZeroResultsSQL, c.choicePolls, c.choices)
	for _, p := range c.figures {
		b.Queue(createFiguresSQL, p.ID, p.Choices, p.BallotRules().Kind == vote.KindRanked)
	}
	if len(c.eligible) > 0 {
		b.Queue(bulkEligibleSQL, c.eligiblePolls, c.eligible)
	}
	return tx.SendBatch(ctx, b).Close()
}

// definitionsSQL is definitionSQL for many polls.
const definitionsSQL = `
SELECT p.id, p.title, p.opens_at, p.closes_at, p.eligibility, ` + rulesColsP + `,
       coalesce((SELECT array_agg(c.candidate_id ORDER BY c.position) FROM poll_choices c WHERE c.poll_id = p.id), '{}'),
       coalesce((SELECT array_agg(e.principal_id) FROM poll_eligible e WHERE e.poll_id = p.id), '{}')
FROM polls p WHERE p.id = ANY($1::text[])`

// appendDefinitions writes each new poll's definition, as the catalog
// holds it in tx, as the first leaf of its log, as appendDefinition does
// for one: the heads locked, the definitions read and inserted, the logs
// written, one statement each.
func (c *bulkCreate) appendDefinitions(ctx context.Context, tx pgx.Tx) error {
	const what = "log the definitions of new polls"
	heads, err := lockHeads(ctx, tx, c.ids)
	if err != nil {
		return err
	}
	rows, err := tx.Query(ctx, definitionsSQL, c.ids)
	if err != nil {
		return interpretError(what, err)
	}
	var defs []audit.Definition
	var id, eligibility string
	var eligible []string
	var rr rulesRow
	var d audit.Definition
	targets := append(append([]any{&id, &d.Title, &d.OpensAt, &d.ClosesAt, &eligibility}, rr.targets()...), &d.Choices, &eligible)
	_, err = pgx.ForEachRow(rows, targets, func() error {
		def := d
		def.PollID, def.Rules, def.Choices = id, rr.rules(), slices.Clone(d.Choices)
		if d.ClosesAt != nil {
			closes := *d.ClosesAt
			def.ClosesAt = &closes
		}
		if eligibility == EligibleList {
			hash := audit.EligibleListHash(eligible)
			def.EligibleHash = &hash
		}
		defs = append(defs, def)
		return nil
	})
	if err != nil {
		return interpretError(what, err)
	}
	var a defArrays
	for _, d := range defs {
		if err := a.add(d); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	rows, err = tx.Query(ctx, insertDefinitionsSQL, a.polls, a.titles, a.opens, a.closes, a.hashes, a.choices,
		a.kinds, a.min, a.max, a.maxScore, a.budget, a.answers)
	if err != nil {
		return interpretError(what, err)
	}
	defIDs := map[string]int64{}
	var defID int64
	var poll string
	if _, err := pgx.ForEachRow(rows, []any{&defID, &poll}, func() error { defIDs[poll] = defID; return nil }); err != nil {
		return interpretError(what, err)
	}
	var w logWrites
	for _, d := range defs {
		h := heads[d.PollID]
		if h == nil || !h.built || h.state.size != 0 {
			return fmt.Errorf("%s: poll %s has no empty log head", what, d.PollID)
		}
		leaf, err := audit.DefinitionHash(d)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		next, full, err := h.state.extend([]tlog.Hash{leaf})
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		w.addLeaves(d.PollID, h.state.size, []int64{-defIDs[d.PollID]})
		w.add(d.PollID, next, full)
	}
	return w.exec(ctx, tx, what)
}

// insertDefinitionsSQL inserts definitions, returning each one's id and
// poll. The choices of each are a JSON array (arrays of arrays of
// different lengths are not SQL's).
const insertDefinitionsSQL = `
INSERT INTO poll_definitions (poll_id, title, opens_at, closes_at, eligible_hash, choices,
                              ballot_kind, min_choices, max_choices, max_score, budget, answers)
SELECT p, t, o, cl, h, ARRAY(SELECT jsonb_array_elements_text(ch)), k, mn, mx, ms, bu, an
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::bytea[], $6::jsonb[],
            $7::text[], $8::int[], $9::int[], $10::int[], $11::int[], $12::text[])
     AS t(p, t, o, cl, h, ch, k, mn, mx, ms, bu, an)
RETURNING id, poll_id`

// defArrays is definitions as the arrays of insertDefinitionsSQL.
type defArrays struct {
	polls, titles, kinds, answers []string
	opens                         []time.Time
	closes                        []*time.Time
	hashes                        [][]byte
	choices                       []string // each a JSON array
	min, max, maxScore, budget    []*int
}

func (a *defArrays) add(d audit.Definition) error {
	choices, err := json.Marshal(d.Choices)
	if err != nil {
		return err
	}
	var hash []byte
	if d.EligibleHash != nil {
		hash = d.EligibleHash[:]
	}
	r := rulesArgs(d.Rules)
	a.polls, a.titles, a.opens, a.closes = append(a.polls, d.PollID), append(a.titles, d.Title), append(a.opens, d.OpensAt), append(a.closes, d.ClosesAt)
	a.hashes, a.choices = append(a.hashes, hash), append(a.choices, string(choices))
	a.kinds, a.answers = append(a.kinds, r[0].(string)), append(a.answers, r[5].(string))
	a.min, a.max, a.maxScore, a.budget = append(a.min, r[1].(*int)), append(a.max, r[2].(*int)), append(a.maxScore, r[3].(*int)), append(a.budget, r[4].(*int))
	return nil
}
