package ledger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

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
