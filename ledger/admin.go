package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file owns who an administrative change is recorded as made by, and
// the reading of that record (admin_actions, migration 00012). The
// database writes the record itself, by trigger, in the transaction of the
// change, whoever makes it: CreatePoll, ClosePoll, AddPrincipals,
// RevokePrincipal and RetireCredentialKey need only say who asks, which
// they read from their context (ActingAs).

// The roles of a principal.
const (
	RoleVoter = "voter" // may vote and read what it may vote on
	RoleAdmin = "admin" // may also manage polls and principals
)

type actorKey struct{}

// ActingAs returns ctx carrying principalID as the one who asks for the
// administrative changes made with it: admin_actions records it beside the
// database login. A change made without it is recorded with the login
// alone (the CLI's).
func ActingAs(ctx context.Context, principalID string) context.Context {
	return context.WithValue(ctx, actorKey{}, principalID)
}

// setActor tells the triggers of admin_actions, for the rest of tx, who
// asks for its changes: the principal of ctx, if any.
func setActor(ctx context.Context, tx pgx.Tx) error {
	id, _ := ctx.Value(actorKey{}).(string)
	if id == "" {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT set_config('tally.actor', $1, true)`, id)
	return err
}

// adminTx runs fn in a transaction whose changes are recorded as asked
// for by the principal of ctx.
func (s *Store) adminTx(ctx context.Context, what string, fn func(pgx.Tx) error) error {
	return s.runTx(ctx, what, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := setActor(ctx, tx); err != nil {
			return err
		}
		return fn(tx)
	})
}

// AdminAction is one change to the catalog, as admin_actions recorded it.
type AdminAction struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// PrincipalID is who asked, when the change came through intake's
	// admin routes; "" when it did not (the CLI, psql).
	PrincipalID string `json:"principal_id,omitempty"`
	// DBUser is the database login that made the change.
	DBUser string `json:"db_user"`
	// Action is poll.create, poll.close, principal.add, principal.revoke,
	// principal.reissue or credential_key.retire.
	Action string `json:"action"`
	// Target is the poll, principal or key id changed.
	Target string          `json:"target"`
	Detail json.RawMessage `json:"detail"`
}

// AdminActions returns the recorded actions after the one of id after (0:
// from the first), oldest first, at most limit of them.
func (s *Store) AdminActions(ctx context.Context, after int64, limit int) ([]AdminAction, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("read admin actions: %w: the limit must be positive, not %d", ErrInvalid, limit)
	}
	rows, err := s.pool.Query(ctx, `
SELECT id, at, coalesce(principal_id, ''), db_user, action, target, detail::text
FROM admin_actions WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, interpretError("read admin actions", err)
	}
	as, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AdminAction, error) {
		var a AdminAction
		var detail string
		err := r.Scan(&a.ID, &a.At, &a.PrincipalID, &a.DBUser, &a.Action, &a.Target, &detail)
		a.Detail = json.RawMessage(detail)
		return a, err
	})
	return as, interpretError("read admin actions", err)
}
