package ledger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Principal is an authenticated opaque identity.
type Principal struct {
	ID        string
	Name      string
	CreatedAt time.Time
	RevokedAt *time.Time
	// Role is RoleVoter or RoleAdmin; "" for an OpenID Connect subject,
	// whose issuer's tokens say its role, token by token.
	Role string
	// CreatedBy is the admin that added it through intake's admin routes
	// (ActingAs); "" when an operator did.
	CreatedBy string
}

// principalColumns are the columns of a Principal, in its order.
const principalColumns = `id, name, created_at, revoked_at, coalesce(role, ''), coalesce(created_by, '')`

// MaxPrincipalsPerAdd bounds the names one AddPrincipals takes.
const MaxPrincipalsPerAdd = 100_000

// maxNameLen bounds a principal's name, in bytes.
const maxNameLen = 200

// AddPrincipals creates one principal of role ("" for RoleVoter) for each
// of names, in one statement, and returns them in the order of names. They
// have no stored token: the caller issues each a signed credential
// (package credential) naming its id, creation time and role. Names need
// not be unique; ids are random. admin_actions records each as asked for
// by the principal of ctx (ActingAs).
func (s *Store) AddPrincipals(ctx context.Context, names []string, role string) ([]Principal, error) {
	role, err := checkNewPrincipals(names, role)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(names))
	for i := range names {
		if ids[i], err = newPrincipalID(); err != nil {
			return nil, fmt.Errorf("add principals: %w", err)
		}
	}
	var createdAt time.Time
	err = s.adminTx(ctx, "add principals", func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `
WITH added AS (INSERT INTO principals (id, name, role) SELECT id, name, $3 FROM unnest($1::text[], $2::text[]) AS t(id, name)
               RETURNING created_at)
SELECT created_at FROM added LIMIT 1`, ids, names, role).Scan(&createdAt)
	})
	if err != nil {
		return nil, err
	}
	ps := make([]Principal, len(names))
	for i := range names {
		ps[i] = Principal{ID: ids[i], Name: names[i], CreatedAt: createdAt, Role: role}
	}
	return ps, nil
}

// checkNewPrincipals checks what AddPrincipals takes and returns the role
// ("" made RoleVoter); its error is a *FieldError.
func checkNewPrincipals(names []string, role string) (string, error) {
	if len(names) == 0 || len(names) > MaxPrincipalsPerAdd {
		return "", &FieldError{Op: "add principals", Field: "names", Reason: fmt.Sprintf("give 1-%d names, not %d", MaxPrincipalsPerAdd, len(names))}
	}
	if role == "" {
		role = RoleVoter
	}
	if role != RoleVoter && role != RoleAdmin {
		return "", &FieldError{Op: "add principals", Field: "role", Reason: fmt.Sprintf("the role is %q; it must be %s or %s", role, RoleVoter, RoleAdmin)}
	}
	for i, name := range names {
		if name == "" || len(name) > maxNameLen {
			return "", &FieldError{Op: "add principals", Field: "names",
				Reason: fmt.Sprintf("name %d (%.40q) must be 1-%d bytes", i+1, name, maxNameLen)}
		}
	}
	return role, nil
}

// ErrKeyReused is the error of AddPrincipalsOnce when its key was used by
// the same principal with other names or another role. It wraps
// ErrExists.
var ErrKeyReused = fmt.Errorf("%w: the idempotency key was used with another request", ErrExists)

// AddPrincipalsOnce is AddPrincipals made idempotent by key, a key the
// principal of ctx (ActingAs; "" for the CLI) chose for this request:
// the same key with the same names and role adds nothing the second time
// and returns the principals the first time added (replayed true); with
// other names or another role it adds nothing and is ErrKeyReused. The
// principals' ids are derived from (asker, key, position), so that the
// keys of one asker neither meet nor reveal another's.
func (s *Store) AddPrincipalsOnce(ctx context.Context, key string, names []string, role string) (ps []Principal, replayed bool, err error) {
	if key == "" || len(key) > maxIdempotencyKey {
		return nil, false, &FieldError{Op: "add principals", Field: "Idempotency-Key",
			Reason: fmt.Sprintf("the key must be 1-%d bytes, not %d", maxIdempotencyKey, len(key))}
	}
	if role, err = checkNewPrincipals(names, role); err != nil {
		return nil, false, err
	}
	asker, _ := ctx.Value(actorKey{}).(string)
	ids := make([]string, len(names)+1) // and the id one more name would have had
	for i := range ids {
		ids[i] = keyedPrincipalID(asker, key, i)
	}
	err = s.adminTx(ctx, "add principals", func(tx pgx.Tx) error {
		var added int
		if err := tx.QueryRow(ctx, `
WITH added AS (INSERT INTO principals (id, name, role) SELECT id, name, $3 FROM unnest($1::text[], $2::text[]) AS t(id, name)
               ON CONFLICT (id) DO NOTHING RETURNING 1)
SELECT count(*) FROM added`, ids[:len(names)], names, role).Scan(&added); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+principalColumns+` FROM principals WHERE id = ANY($1::text[])`, ids)
		if err != nil {
			return err
		}
		stored, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Principal])
		if err != nil {
			return err
		}
		byID := make(map[string]Principal, len(stored))
		for _, p := range stored {
			byID[p.ID] = p
		}
		if _, longer := byID[ids[len(names)]]; longer || len(byID) != len(names) {
			return ErrKeyReused
		}
		ps = make([]Principal, len(names))
		for i, name := range names {
			p := byID[ids[i]]
			if p.Name != name || p.Role != role {
				return ErrKeyReused
			}
			ps[i] = p
		}
		replayed = added == 0
		if added != 0 && added != len(names) {
			return ErrKeyReused // some were there: another request's, under this key
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return ps, replayed, nil
}

// maxIdempotencyKey bounds an idempotency key, in bytes.
const maxIdempotencyKey = 255

// keyedPrincipalID is the id of the principal at position i of the
// request asker made under key: "p-" and 24 hex digits, as random ids.
func keyedPrincipalID(asker, key string, i int) string {
	h := sha256.New()
	fmt.Fprintf(h, "tally principal\x00%s\x00%s\x00%d", asker, key, i)
	return "p-" + hex.EncodeToString(h.Sum(nil)[:12])
}

// newPrincipalID is a fresh random principal id: "p-" and 24 hex digits.
func newPrincipalID() (string, error) {
	var raw [12]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	return "p-" + hex.EncodeToString(raw[:]), nil
}

// Principal returns the principal of id, revoked or not.
func (s *Store) Principal(ctx context.Context, id string) (Principal, error) {
	var p Principal
	err := s.pool.QueryRow(ctx, `SELECT `+principalColumns+` FROM principals WHERE id = $1`, id).
		Scan(&p.ID, &p.Name, &p.CreatedAt, &p.RevokedAt, &p.Role, &p.CreatedBy)
	return p, interpretError("principal "+id, err)
}

// ReissuePrincipal makes every token principal id was issued so far
// stop working, so that a new one replaces them (tally principal
// reissue): its signed tokens issued before validAfter are refused from
// then on (intake holds it with the revocations). validAfter is the next whole second, later
// than the issue time of any token issued before (signed tokens carry
// whole seconds) and than the last reissue's: issue the new token at
// validAfter. It returns the principal; a revoked one is ErrInvalid.
// admin_actions records it as asked for by the principal of ctx
// (ActingAs).
func (s *Store) ReissuePrincipal(ctx context.Context, id string) (p Principal, validAfter time.Time, err error) {
	err = s.adminTx(ctx, "reissue principal "+id, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
UPDATE principals SET
    valid_after = greatest(date_trunc('second', now()), date_trunc('second', valid_after)) + interval '1 second'
WHERE id = $1 RETURNING `+principalColumns+`, valid_after`, id).
			Scan(&p.ID, &p.Name, &p.CreatedAt, &p.RevokedAt, &p.Role, &p.CreatedBy, &validAfter)
		if err != nil {
			return err
		}
		if p.RevokedAt != nil {
			return fmt.Errorf("%w: it was revoked at %s", ErrInvalid, p.RevokedAt.UTC().Format(time.RFC3339))
		}
		return nil
	})
	if err != nil {
		return Principal{}, time.Time{}, err
	}
	return p, validAfter, nil
}

// OIDCPrincipalPrefix starts the id of a principal of an OpenID Connect
// issuer (credential.PrincipalIDFor); such a principal has no row until it
// is revoked.
const OIDCPrincipalPrefix = "o-"

// RevokePrincipal revokes a principal: every token naming it is refused.
// Its ledger rows stay. A principal of an OpenID Connect issuer, which has
// no row, gets one, revoked. Revoking twice changes nothing the second
// time. admin_actions records it as asked for by the principal of ctx
// (ActingAs).
func (s *Store) RevokePrincipal(ctx context.Context, id string) error {
	sql := `UPDATE principals SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`
	if strings.HasPrefix(id, OIDCPrincipalPrefix) {
		sql = `INSERT INTO principals (id, name, role, revoked_at) VALUES ($1, 'OpenID Connect subject', NULL, now())
ON CONFLICT (id) DO UPDATE SET revoked_at = coalesce(principals.revoked_at, now())`
	}
	return s.adminTx(ctx, "revoke principal "+id, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sql, id)
		if err == nil && tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return err
	})
}

// RevokeMinted revokes the principals admin id minted (added through
// intake's admin routes, ActingAs), those they minted, and so on, in one
// transaction, and returns how many it revoked that were not revoked
// before. Their ledger rows stay. admin_actions records each as asked for
// by the principal of ctx. Revoke id itself with RevokePrincipal.
func (s *Store) RevokeMinted(ctx context.Context, id string) (int, error) {
	var n int
	err := s.adminTx(ctx, "revoke what principal "+id+" minted", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
WITH RECURSIVE minted (id) AS (
    SELECT id FROM principals WHERE created_by = $1
    UNION
    SELECT p.id FROM principals p JOIN minted m ON p.created_by = m.id
)
UPDATE principals SET revoked_at = now() WHERE id IN (SELECT id FROM minted) AND id <> $1 AND revoked_at IS NULL`, id)
		n = int(tag.RowsAffected())
		return err
	})
	return n, err
}

// Principals lists every principal, oldest first.
func (s *Store) Principals(ctx context.Context) ([]Principal, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+principalColumns+` FROM principals ORDER BY created_at, id`)
	if err != nil {
		return nil, interpretError("list principals", err)
	}
	ps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Principal])
	return ps, interpretError("list principals", err)
}

// PrincipalsAfter lists at most limit principals whose ids come after
// after (byte order; "" for the first), in that order: a page of a list
// too long for one answer.
func (s *Store) PrincipalsAfter(ctx context.Context, after string, limit int) ([]Principal, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("list principals: %w: the limit must be positive, not %d", ErrInvalid, limit)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+principalColumns+` FROM principals WHERE id > $1 ORDER BY id LIMIT $2`,
		after, limit)
	if err != nil {
		return nil, interpretError("list principals", err)
	}
	ps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Principal])
	return ps, interpretError("list principals", err)
}
