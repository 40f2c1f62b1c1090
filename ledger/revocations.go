package ledger

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file owns what refuses a credential whatever it says: revoked
// principals, retired credential keys and reissued principals' valid-after
// times, read whole or for the principals and keys a catalog change named.

// Revocations is what no credential may name any longer: the revoked
// principals, the retired credential keys, and the tokens of a reissued
// principal issued before its reissue.
type Revocations struct {
	Principals map[string]struct{}
	Keys       map[string]struct{}
	// ValidAfter is, for each principal reissued and not revoked, the
	// least issue time its tokens may have (ReissuePrincipal).
	ValidAfter map[string]time.Time
}

// The reads of revocations, each row (kind, id, valid-after time): all
// of them, and those among some principal ids ($1) and key ids ($2).
const (
	revocationsSQL = `
SELECT 'principal', id, NULL::timestamptz FROM principals WHERE revoked_at IS NOT NULL
UNION ALL
SELECT 'key', key_id, NULL FROM credential_key_retirements
UNION ALL
SELECT 'valid_after', id, valid_after FROM principals WHERE valid_after IS NOT NULL AND revoked_at IS NULL`
	revocationsOfSQL = `
SELECT 'principal', id, NULL::timestamptz FROM principals WHERE id = ANY($1::text[]) AND revoked_at IS NOT NULL
UNION ALL
SELECT 'key', key_id, NULL FROM credential_key_retirements WHERE key_id = ANY($2::text[])
UNION ALL
SELECT 'valid_after', id, valid_after FROM principals WHERE id = ANY($1::text[]) AND valid_after IS NOT NULL AND revoked_at IS NULL`
)

// Revocations reads every revoked principal, retired key and reissued
// principal's valid-after time, in one snapshot.
func (s *Store) Revocations(ctx context.Context) (Revocations, error) {
	return s.queryRevocations(ctx, revocationsSQL)
}

// RevocationsOf reads which of principals are revoked or reissued and
// which of keys are retired, in one snapshot: what a cache of the
// revocations applies for the changes that named them.
func (s *Store) RevocationsOf(ctx context.Context, principals, keys []string) (Revocations, error) {
	return s.queryRevocations(ctx, revocationsOfSQL, principals, keys)
}

func (s *Store) queryRevocations(ctx context.Context, sql string, args ...any) (Revocations, error) {
	r := Revocations{Principals: map[string]struct{}{}, Keys: map[string]struct{}{}, ValidAfter: map[string]time.Time{}}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return Revocations{}, interpretError("read revocations", err)
	}
	var kind, id string
	var at *time.Time
	_, err = pgx.ForEachRow(rows, []any{&kind, &id, &at}, func() error {
		switch kind {
		case "key":
			r.Keys[id] = struct{}{}
		case "principal":
			r.Principals[id] = struct{}{}
		default:
			r.ValidAfter[id] = *at
		}
		return nil
	})
	if err != nil {
		return Revocations{}, interpretError("read revocations", err)
	}
	return r, nil
}

// RetireCredentialKey retires the credential key id: every intake refuses
// the tokens it signed, as soon as it hears of it. Retiring a key twice
// changes nothing.
func (s *Store) RetireCredentialKey(ctx context.Context, id string) error {
	return s.adminTx(ctx, "retire credential key "+id, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO credential_key_retirements (key_id) VALUES ($1) ON CONFLICT DO NOTHING`, id)
		return err
	})
}

// RetiredCredentialKeys are the retired credential key ids, each with
// when it was retired.
func (s *Store) RetiredCredentialKeys(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.pool.Query(ctx, `SELECT key_id, retired_at FROM credential_key_retirements`)
	if err != nil {
		return nil, interpretError("read retired credential keys", err)
	}
	retired := map[string]time.Time{}
	var id string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		retired[id] = at
		return nil
	})
	if err != nil {
		return nil, interpretError("read retired credential keys", err)
	}
	return retired, nil
}
