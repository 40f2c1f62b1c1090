package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"tally/audit"
	"tally/vote"

	"github.com/jackc/pgx/v5"
)

// Eligibility modes of a poll.
const (
	EligibleAny  = "any"  // every principal may answer
	EligibleList = "list" // only the principals listed in Poll.Eligible
)

// Poll is a poll with its choices and, for EligibleList, its eligible
// principals.
type Poll struct {
	ID          string
	Title       string
	OpensAt     time.Time  // zero: now, when creating
	ClosesAt    *time.Time // nil: open until closed
	Eligibility string     // EligibleAny or EligibleList; set from Eligible when creating
	Choices     []string   // candidate ids, in display order
	Eligible    []string   // principal ids, for EligibleList
	// PublicResults lets anyone see the poll's results without a token:
	// intake's live results page and live stream. Otherwise only the
	// principals that may vote on it see them.
	PublicResults bool
	// Rules are the poll's ballot kind, its parameters and its answers
	// mode, fixed when it is created (vote.NewRules makes them); the zero
	// value is vote.Single.
	Rules     vote.Rules
	CreatedAt time.Time
}

// BallotRules is p.Rules, vote.Single for the zero value.
func (p Poll) BallotRules() vote.Rules {
	if p.Rules == (vote.Rules{}) {
		return vote.Single
	}
	return p.Rules
}

// OpenAt reports whether the poll takes votes received at t: the rule
// the ledger's statements ask of SQL function poll_open_at (migration
// 00018), to which TestOpenAtAgreesWithSQL holds it.
func (p Poll) OpenAt(t time.Time) bool {
	return !t.Before(p.OpensAt) && (p.ClosesAt == nil || t.Before(*p.ClosesAt))
}

// The states of a poll at a time (Poll.State).
const (
	StateScheduled = "scheduled" // it opens later
	StateOpen      = "open"
	StateClosed    = "closed"
)

// State is the poll's state at now.
func (p Poll) State(now time.Time) string {
	switch {
	case now.Before(p.OpensAt):
		return StateScheduled
	case p.OpenAt(now):
		return StateOpen
	default:
		return StateClosed
	}
}

// CreatePoll creates a poll with its choices, eligibility list and a zero
// tally for each choice. Eligibility is EligibleList when Eligible is not
// empty. It is recorded in admin_actions as asked for by the principal of
// ctx (ActingAs), as ClosePoll is.
func (s *Store) CreatePoll(ctx context.Context, p Poll) error {
	if err := p.validateNew(); err != nil {
		return err
	}
	eligibility := EligibleAny
	if len(p.Eligible) > 0 {
		eligibility = EligibleList
	}
	var opens *time.Time
	if !p.OpensAt.IsZero() {
		opens = &p.OpensAt
	}
	return s.adminTx(ctx, "create poll "+p.ID, func(tx pgx.Tx) error {
		args := append([]any{p.ID, p.Title, opens, p.ClosesAt, eligibility, p.PublicResults}, rulesArgs(p.BallotRules())...)
		if _, err := tx.Exec(ctx, createPollSQL, args...); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, createChoicesSQL, p.ID, p.Choices); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, createZeroResultsSQL, p.ID, p.Choices); err != nil {
			return err
		}
		if r := p.BallotRules(); !r.IsDefault() {
			if _, err := tx.Exec(ctx, createFiguresSQL, p.ID, p.Choices, r.Kind == vote.KindRanked); err != nil {
				return err
			}
		}
		if len(p.Eligible) > 0 {
			if _, err := tx.Exec(ctx, createEligibleSQL, p.ID, p.Eligible); err != nil {
				return err
			}
		}
		h, err := lockHead(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		return appendDefinition(ctx, tx, p.ID, h)
	})
}

// The statements of CreatePoll, in the order it runs them. A poll opens now
// unless it says when.
const (
	createPollSQL = `
INSERT INTO polls (id, title, opens_at, closes_at, eligibility, public_results,
                   ballot_kind, min_choices, max_choices, max_score, budget, answers)
VALUES ($1, $2, coalesce($3, now()), $4, $5, $6, $7, $8, $9, $10, $11, $12)`
	createChoicesSQL = `
INSERT INTO poll_choices (poll_id, candidate_id, position)
SELECT $1, c, ord FROM unnest($2::text[]) WITH ORDINALITY AS t(c, ord)`
	createZeroResultsSQL = `
INSERT INTO poll_results (poll_id, candidate_id, vote_count)
SELECT $1, c, 0 FROM unnest($2::text[]) AS t(c)
ON CONFLICT DO NOTHING`
	createEligibleSQL = `
INSERT INTO poll_eligible (poll_id, principal_id)
SELECT DISTINCT $1, e FROM unnest($2::text[]) AS t(e)`
)

// FieldError is ErrInvalid for one field of what was asked: Field names
// it as the HTTP API spells it (poll_id, title, choices, eligible,
// closes_at, names, role), Reason says what is wrong with it.
type FieldError struct {
	Op     string // what was being done: "create poll lunch"
	Field  string
	Reason string
	// Limit, when not 0, is the stated limit the field is over (MaxChoices,
	// MaxEligible): the request is well formed, but too big.
	Limit int
}

func (e *FieldError) Error() string { return e.Op + ": " + ErrInvalid.Error() + ": " + e.Reason }

func (e *FieldError) Unwrap() error { return ErrInvalid }

// The stated limits of a poll's definition. Every intake holds every
// poll, with its choices and its eligibility list, in memory, and reads a
// poll again whole when it changes: these bound what one poll costs it
// (docs/operations.md).
const (
	MaxChoices  = 1_000   // choices of one poll
	MaxEligible = 100_000 // principals on one poll's eligibility list
)

// validateNew checks a poll given to CreatePoll: valid ids, a title a
// definition leaf can hold, 1 to MaxChoices choices and no choice twice,
// at most MaxEligible eligible principals, and no closing before opening.
// Its error is a *FieldError, with its Limit for a stated limit.
func (p Poll) validateNew() error {
	bad := func(field, format string, args ...any) error {
		op := "create poll"
		if vote.ValidID(p.ID) {
			op += " " + p.ID
		}
		return &FieldError{Op: op, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	overLimit := func(field string, limit int, format string, args ...any) error {
		err := bad(field, format, args...).(*FieldError)
		err.Limit = limit
		return err
	}
	if !vote.ValidID(p.ID) {
		return bad("poll_id", "poll id %q must be "+vote.IDRule, p.ID)
	}
	switch {
	case p.Title == "":
		return bad("title", "the title is empty")
	case len(p.Title) > audit.MaxTitleLen:
		return bad("title", "the title is %d bytes; it may have at most %d", len(p.Title), audit.MaxTitleLen)
	case !utf8.ValidString(p.Title):
		return bad("title", "the title is not valid UTF-8")
	case len(p.Choices) < 1:
		return bad("choices", "give at least one choice")
	case len(p.Choices) > MaxChoices:
		return overLimit("choices", MaxChoices, "%d choices; a poll has at most %d: split it into polls of fewer choices",
			len(p.Choices), MaxChoices)
	case len(p.Eligible) > MaxEligible:
		return overLimit("eligible", MaxEligible, "%d eligible principals; a poll's list has at most %d: "+
			"leave the list out (any principal may answer) and give voters of this poll their own credentials, or split the poll",
			len(p.Eligible), MaxEligible)
	}
	dup := map[string]bool{}
	for _, c := range p.Choices {
		if !vote.ValidID(c) {
			return bad("choices", "choice %q must be "+vote.IDRule, c)
		}
		if dup[c] {
			return bad("choices", "choice %q is given twice", c)
		}
		dup[c] = true
	}
	for _, e := range p.Eligible {
		if !vote.ValidID(e) {
			return bad("eligible", "eligible principal %q must be "+vote.IDRule, e)
		}
	}
	if p.ClosesAt != nil && !p.OpensAt.IsZero() && p.ClosesAt.Before(p.OpensAt) {
		return bad("closes_at", "it closes before it opens")
	}
	r := p.BallotRules()
	if again, err := vote.NewRules(r.Spec(), len(p.Choices)); err != nil {
		var re *vote.RuleError
		if errors.As(err, &re) {
			return bad(re.Field, "%s", re.Reason)
		}
		return bad("ballot", "%s", err)
	} else if again != r {
		return bad("ballot", "the ballot's rules are not complete: make them with vote.NewRules")
	}
	return nil
}

// ClosePoll closes a poll at the time at (or keeps an earlier closing time).
// Events received from then on are rejected as poll_closed. A closing
// time that changes appends the poll's definition to its log, under its
// head's lock, which appends take before they check their votes against
// the window: no vote the new window refuses gets a leaf after it.
func (s *Store) ClosePoll(ctx context.Context, id string, at time.Time) error {
	return s.adminTx(ctx, "close poll "+id, func(tx pgx.Tx) error {
		h, err := lockHead(ctx, tx, id)
		if err != nil {
			return err
		}
		var changed bool
		err = tx.QueryRow(ctx, `
WITH old AS (SELECT id, closes_at FROM polls WHERE id = $1)
UPDATE polls p SET closes_at = least(coalesce(p.closes_at, $2), greatest($2, p.opens_at))
FROM old WHERE p.id = old.id
RETURNING p.closes_at IS DISTINCT FROM old.closes_at`, id, at).Scan(&changed)
		if err != nil || !changed {
			return err
		}
		return appendDefinition(ctx, tx, id, h)
	})
}

// pollColumnsSQL is what the reads of polls (p) select, in the order
// pollRow scans it.
const pollColumnsSQL = `
p.id, p.title, p.opens_at, p.closes_at, p.eligibility, p.public_results, p.created_at, ` + rulesColsP + `,
coalesce((SELECT array_agg(c.candidate_id ORDER BY c.position) FROM poll_choices c WHERE c.poll_id = p.id), '{}'),
coalesce((SELECT array_agg(e.principal_id ORDER BY e.principal_id) FROM poll_eligible e WHERE e.poll_id = p.id), '{}')`

// The reads of polls: all of them, a page in id order, and one poll's
// (through an array of ids: "$1 IS NULL OR p.id = $1" would let
// PostgreSQL's generic plan of the prepared statement scan every poll,
// and JIT-compile the scan, for one id).
const (
	pollsSQL      = `SELECT ` + pollColumnsSQL + ` FROM polls p ORDER BY p.created_at, p.id`
	pollsAfterSQL = `SELECT ` + pollColumnsSQL + ` FROM polls p WHERE p.id > $1 ORDER BY p.id LIMIT $2`
	pollsOfSQL    = `SELECT ` + pollColumnsSQL + ` FROM polls p WHERE p.id = ANY($1::text[])`
)

// Polls lists every poll with its choices and eligibility list, oldest
// first.
func (s *Store) Polls(ctx context.Context) ([]Poll, error) {
	return s.queryPolls(ctx, "list polls", pollsSQL)
}

// Poll returns one poll, or ErrNotFound.
func (s *Store) Poll(ctx context.Context, id string) (Poll, error) {
	ps, err := s.queryPolls(ctx, "read poll "+id, pollsOfSQL, []string{id})
	if err != nil {
		return Poll{}, err
	}
	if len(ps) == 0 {
		return Poll{}, fmt.Errorf("poll %s: %w", id, ErrNotFound)
	}
	return ps[0], nil
}

// PollsAfter lists at most limit polls whose ids come after after (byte
// order; "" for the first), in that order: a page of the catalog, read in
// a statement of its own. PostgreSQL does not JIT-compile it: a page of
// long eligibility lists is estimated costly enough to be, and the
// compilation costs more than it saves on a read done once.
func (s *Store) PollsAfter(ctx context.Context, after string, limit int) ([]Poll, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("list polls: %w: the limit must be positive, not %d", ErrInvalid, limit)
	}
	var ps []Poll
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
			return err
		}
		var err error
		ps, err = queryPolls(ctx, tx, pollsAfterSQL, after, limit)
		return err
	})
	return ps, interpretError("list polls", err)
}

func (s *Store) queryPolls(ctx context.Context, what, sql string, args ...any) ([]Poll, error) {
	ps, err := queryPolls(ctx, s.pool, sql, args...)
	return ps, interpretError(what, err)
}

// querier runs a query: the pool, or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryPolls runs a read of polls selecting pollColumnsSQL; its error is
// pgx's.
func queryPolls(ctx context.Context, q querier, sql string, args ...any) ([]Poll, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Poll, error) {
		var pr pollRow
		err := r.Scan(pr.targets()...)
		return pr.poll(), err
	})
}

// pollRow scans the columns of pollColumnsSQL.
type pollRow struct {
	p  Poll
	rr rulesRow
}

func (r *pollRow) targets() []any {
	p := &r.p
	return slices.Concat([]any{&p.ID, &p.Title, &p.OpensAt, &p.ClosesAt, &p.Eligibility, &p.PublicResults, &p.CreatedAt},
		r.rr.targets(), []any{&p.Choices, &p.Eligible})
}

// poll is the poll scanned.
func (r *pollRow) poll() Poll {
	p := r.p
	p.Rules = r.rr.rules()
	return p
}
