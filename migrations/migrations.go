// Package migrations holds tally's PostgreSQL schema as goose SQL files,
// embedded in the binary. The same files apply with the goose command-line
// tool (goose -dir migrations postgres URL up).
//
// Up creates, and Down removes, everything tally keeps in PostgreSQL: polls,
// choices, principals, the append-only ledger poll_events (its trigger
// refuses UPDATE, DELETE and TRUNCATE), the rejection records, the
// poll_results projection, each poll's Merkle log and its signed
// checkpoints, the record of administrative actions, and the grants of
// the daemons' roles tally_daemon and tally_admin (the roles themselves are
// the server's, and stay).
//
// # Files
//
//   - 00001_ledger.sql: the tables and the append-only trigger.
//   - 00002_catalog_notify.sql: NOTIFY tally_catalog, with the table's name,
//     when polls, choices, eligibility or principals change (replaced by
//     00015's change log).
//   - 00003_ids_collate_c.sql: every id column compares bytewise (COLLATE "C").
//   - 00004_merkle_log.sql: each poll's Merkle log: every ledger row's leaf
//     index, the heads (size, root, partial tiles) and the full tiles
//     (append-only). The rows already there are numbered in seq order;
//     their hashes are Go's work (ledger.Store.BuildLogs, which tally
//     migrate up runs): goose's own command applies the SQL but leaves
//     those logs to build, which the first append to each poll then does.
//   - 00005_log_checkpoints.sql: every signed checkpoint of each poll's log
//     (poll, size, root, the signed note), append-only like the ledger.
//   - 00006_daemon_role.sql: the role tally_daemon, made if missing, with
//     only what intake and the projector need: SELECT, INSERT on the
//     append-only tables, INSERT and UPDATE on the projection and the log
//     heads. Down revokes this database's grants and leaves the role,
//     which belongs to the whole server.
//   - 00007_log_leaves.sql: each poll's leaf order moves from a column of
//     the ledger rows to poll_log_leaves (one row per append and poll: the
//     seqs of its new rows in leaf order), so an append numbers its rows
//     after inserting them.
//   - 00008_public_results.sql: polls.public_results, whether a poll's
//     results, live page and stream need no token.
//   - 00009_log_tiles_height4.sql: the logs' tiles of height 4 instead of
//     8; the tiles are made again by ledger.Store.BuildLogs (tally migrate
//     up), to the same roots.
//   - 00010_signed_credentials.sql: principals added from then on keep no
//     token (their signed credentials name them); the retired credential
//     keys, which every intake refuses.
//   - 00011_poll_definitions.sql: each poll's definition, a leaf of its
//     log (docs/audit.md); down is refused once one is logged.
//   - 00012_admin.sql: principals' role (voter or admin); admin_actions,
//     the record of every change to the catalog, written by triggers as
//     the owner, append-only, its ids in commit order; the role
//     tally_admin (tally_daemon, and may add and close polls, add and
//     revoke principals). Down is refused once admin_actions holds a row.
//   - 00015_catalog_changes.sql: the catalog's change log
//     (catalog_changes): one row per poll, principal or key a transaction
//     changed, written by triggers in that transaction, numbered in commit
//     order, trimmed to its last 100,000; NOTIFY tally_catalog carries the
//     last seq, and a write that changed nothing notifies nothing
//     (ledger.Store.WatchCatalog, CatalogChangesAfter).
//   - 00016_latest_by_seq.sql: a principal's ballot that counts in a poll
//     of answers latest is its last row by seq, found by an index of
//     poll_events; poll_voters is dropped (down fills it again from the
//     ledger).
//   - 00017_drop_stored_tokens.sql: principals.token_sha256 goes: tokens of
//     the stored kind were never taken by a release, and every principal
//     authenticates with a signed or an OpenID Connect credential. Down
//     brings the column back, empty.
//   - 00018_poll_open_at.sql: poll_open_at(opens_at, closes_at, t), the
//     rule "a poll takes a vote received at t", written once for the
//     ledger's statements (its Go twin is ledger.Poll.OpenAt).
//   - 00019_poll_events_ids.sql: the ledger's poll and principal ids keep
//     the id rule (vote.ValidID) by a check; a row already there that
//     breaks it fails the migration, naming it.
//   - 00020_id_checks_unbounded.sql: the catalog's id checks say the same
//     rule without the bounded repetition {1,64}, which PostgreSQL runs
//     tens of times slower.
//   - migrations.go: the embedded files and goose's provider over them.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// FS holds the SQL migrations.
//
//go:embed *.sql
var FS embed.FS

// NewProvider returns a goose provider over the embedded migrations. A
// PostgreSQL session lock serialises providers, so two daemons that migrate
// at start do not race.
func NewProvider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrations: session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration.
func Up(ctx context.Context, db *sql.DB) error {
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}
