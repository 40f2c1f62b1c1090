package ledger

import (
	"context"
	"fmt"
)

// This file owns what the store can tell of the role it logs in as: a
// daemon should run as a login granted tally_daemon (migration 00006),
// which may append to the ledger but not change or delete what is in it,
// nor switch its triggers off.

// Role is the PostgreSQL role a Store's connections log in as.
type Role struct {
	Name      string
	Superuser bool
	// MayChangeLedger: the role may UPDATE, DELETE or TRUNCATE
	// poll_events (as its owner may), so a bug or an attacker in a daemon
	// could rewrite what the triggers alone then guard.
	MayChangeLedger bool
}

// Privileged reports whether the role may do more than a daemon needs.
func (r Role) Privileged() bool { return r.Superuser || r.MayChangeLedger }

// Role reads the role the store's connections log in as. Before the
// migrations made poll_events, MayChangeLedger is false.
func (s *Store) Role(ctx context.Context) (Role, error) {
	var r Role
	err := s.pool.QueryRow(ctx, `
SELECT current_user, r.rolsuper,
       coalesce(has_table_privilege(to_regclass('poll_events'), 'UPDATE')
             OR has_table_privilege(to_regclass('poll_events'), 'DELETE')
             OR has_table_privilege(to_regclass('poll_events'), 'TRUNCATE'), false)
FROM pg_roles r WHERE r.rolname = current_user`).Scan(&r.Name, &r.Superuser, &r.MayChangeLedger)
	if err != nil {
		return Role{}, fmt.Errorf("read the role logged in as: %w", err)
	}
	return r, nil
}
