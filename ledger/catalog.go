package ledger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"

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
	CreatedAt   time.Time
}

// OpenAt reports whether the poll takes votes received at t.
func (p Poll) OpenAt(t time.Time) bool {
	return !t.Before(p.OpensAt) && (p.ClosesAt == nil || t.Before(*p.ClosesAt))
}

// CreatePoll creates a poll with its choices, eligibility list and a zero
// tally for each choice. Eligibility is EligibleList when Eligible is not
// empty.
func (s *Store) CreatePoll(ctx context.Context, p Poll) error {
	if !vote.ValidID(p.ID) {
		return fmt.Errorf("create poll: %w: poll id %q must be "+vote.IDRule, ErrInvalid, p.ID)
	}
	if p.Title == "" {
		return fmt.Errorf("create poll %s: %w: the title is empty", p.ID, ErrInvalid)
	}
	if len(p.Choices) < 1 {
		return fmt.Errorf("create poll %s: %w: give at least one choice", p.ID, ErrInvalid)
	}
	dup := map[string]bool{}
	for _, c := range p.Choices {
		if !vote.ValidID(c) {
			return fmt.Errorf("create poll %s: %w: choice %q must be "+vote.IDRule, p.ID, ErrInvalid, c)
		}
		if dup[c] {
			return fmt.Errorf("create poll %s: %w: choice %q is given twice", p.ID, ErrInvalid, c)
		}
		dup[c] = true
	}
	for _, e := range p.Eligible {
		if !vote.ValidID(e) {
			return fmt.Errorf("create poll %s: %w: eligible principal %q must be "+vote.IDRule, p.ID, ErrInvalid, e)
		}
	}
	eligibility := EligibleAny
	if len(p.Eligible) > 0 {
		eligibility = EligibleList
	}
	var opens *time.Time
	if !p.OpensAt.IsZero() {
		opens = &p.OpensAt
	}
	if p.ClosesAt != nil && opens != nil && p.ClosesAt.Before(*opens) {
		return fmt.Errorf("create poll %s: %w: it closes before it opens", p.ID, ErrInvalid)
	}
	return s.runTx(ctx, "create poll "+p.ID, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO polls (id, title, opens_at, closes_at, eligibility)
VALUES ($1, $2, coalesce($3, now()), $4, $5)`, p.ID, p.Title, opens, p.ClosesAt, eligibility); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO poll_choices (poll_id, candidate_id, position)
SELECT $1, c, ord FROM unnest($2::text[]) WITH ORDINALITY AS t(c, ord)`, p.ID, p.Choices); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO poll_results (poll_id, candidate_id, vote_count)
SELECT $1, c, 0 FROM unnest($2::text[]) AS t(c)
ON CONFLICT DO NOTHING`, p.ID, p.Choices); err != nil {
			return err
		}
		if len(p.Eligible) > 0 {
			if _, err := tx.Exec(ctx, `
INSERT INTO poll_eligible (poll_id, principal_id)
SELECT DISTINCT $1, e FROM unnest($2::text[]) AS t(e)`, p.ID, p.Eligible); err != nil {
				return err
			}
		}
		return nil
	})
}

// ClosePoll closes a poll at the time at (or keeps an earlier closing time).
// Events received from then on are rejected as poll_closed.
func (s *Store) ClosePoll(ctx context.Context, id string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `
UPDATE polls SET closes_at = least(coalesce(closes_at, $2), greatest($2, opens_at))
WHERE id = $1`, id, at)
	if err != nil {
		return interpretError("close poll "+id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("close poll %s: %w", id, ErrNotFound)
	}
	return nil
}

const pollsSQL = `
SELECT p.id, p.title, p.opens_at, p.closes_at, p.eligibility, p.created_at,
       coalesce((SELECT array_agg(c.candidate_id ORDER BY c.position) FROM poll_choices c WHERE c.poll_id = p.id), '{}'),
       coalesce((SELECT array_agg(e.principal_id ORDER BY e.principal_id) FROM poll_eligible e WHERE e.poll_id = p.id), '{}')
FROM polls p
WHERE $1::text IS NULL OR p.id = $1
ORDER BY p.created_at, p.id`

// Polls lists every poll with its choices and eligibility list, oldest
// first.
func (s *Store) Polls(ctx context.Context) ([]Poll, error) {
	return s.queryPolls(ctx, nil)
}

// Poll returns one poll, or ErrNotFound.
func (s *Store) Poll(ctx context.Context, id string) (Poll, error) {
	ps, err := s.queryPolls(ctx, &id)
	if err != nil {
		return Poll{}, err
	}
	if len(ps) == 0 {
		return Poll{}, fmt.Errorf("poll %s: %w", id, ErrNotFound)
	}
	return ps[0], nil
}

func (s *Store) queryPolls(ctx context.Context, id *string) ([]Poll, error) {
	rows, err := s.pool.Query(ctx, pollsSQL, id)
	if err != nil {
		return nil, interpretError("list polls", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Poll, error) {
		var p Poll
		err := r.Scan(&p.ID, &p.Title, &p.OpensAt, &p.ClosesAt, &p.Eligibility, &p.CreatedAt, &p.Choices, &p.Eligible)
		return p, err
	})
	return ps, interpretError("list polls", err)
}

// Principal is an authenticated opaque identity.
type Principal struct {
	ID        string
	Name      string
	CreatedAt time.Time
	RevokedAt *time.Time
}

// TokenHash is the SHA-256 of a bearer token, the only form stored.
func TokenHash(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// AddPrincipal creates a principal named name with a fresh random bearer
// token, and returns both. The token is not stored and cannot be shown
// again.
func (s *Store) AddPrincipal(ctx context.Context, name string) (Principal, string, error) {
	if name == "" || len(name) > 200 {
		return Principal{}, "", fmt.Errorf("add principal: %w: the name must be 1-200 characters", ErrInvalid)
	}
	var raw [12]byte
	var secret [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Principal{}, "", fmt.Errorf("add principal: %w", err)
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return Principal{}, "", fmt.Errorf("add principal: %w", err)
	}
	p := Principal{ID: "p-" + hex.EncodeToString(raw[:]), Name: name}
	token := "tly_" + base64.RawURLEncoding.EncodeToString(secret[:])
	h := TokenHash(token)
	err := s.pool.QueryRow(ctx, `
INSERT INTO principals (id, name, token_sha256) VALUES ($1, $2, $3) RETURNING created_at`,
		p.ID, p.Name, h[:]).Scan(&p.CreatedAt)
	if err != nil {
		return Principal{}, "", interpretError("add principal", err)
	}
	return p, token, nil
}

// RevokePrincipal revokes a principal's token. Its ledger rows stay.
func (s *Store) RevokePrincipal(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE principals SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`, id)
	if err != nil {
		return interpretError("revoke principal "+id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("revoke principal %s: %w", id, ErrNotFound)
	}
	return nil
}

// Principals lists every principal, oldest first.
func (s *Store) Principals(ctx context.Context) ([]Principal, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, name, created_at, revoked_at FROM principals ORDER BY created_at, id`)
	if err != nil {
		return nil, interpretError("list principals", err)
	}
	ps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Principal])
	return ps, interpretError("list principals", err)
}

// Authenticate returns the principal whose token is token. An unknown or
// revoked token gives ErrNotFound.
func (s *Store) Authenticate(ctx context.Context, token string) (Principal, error) {
	h := TokenHash(token)
	var p Principal
	err := s.pool.QueryRow(ctx, `
SELECT id, name, created_at, revoked_at FROM principals WHERE token_sha256 = $1 AND revoked_at IS NULL`,
		h[:]).Scan(&p.ID, &p.Name, &p.CreatedAt, &p.RevokedAt)
	if err != nil {
		return Principal{}, interpretError("authenticate", err)
	}
	return p, nil
}
