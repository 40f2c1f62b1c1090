// Package ledger owns everything tally keeps in PostgreSQL: the append-only
// ledger of votes (poll_events), the records of events that had no tally
// effect (poll_event_rejections), the poll_results projection, and the
// catalog of polls, choices and principals.
//
// # What it promises
//
// Store.Append applies a batch of events in ONE transaction and returns one
// Outcome per event:
//
//   - recorded: a new ledger row; its poll_results row grows by one in the
//     same transaction. Only new ledger rows change tallies (I3).
//   - duplicate: the identical event (same principal, client key and payload)
//     is already in the ledger, or earlier in the same batch. Applying a
//     batch a second time, as a retry after an uncertain commit does, yields
//     duplicate for every event and changes nothing (I2).
//   - rejected, with a Reason: already_responded, key_reused, poll_closed,
//     invalid_choice, unknown_poll or not_eligible. The rejection is recorded
//     once per (principal, client key); replaying the same event returns the
//     recorded rejection again.
//
// A rejected event never fails the rest of its batch. A batch costs a few
// round trips whatever its size, and a batch of new events costs one
// statement: an optimistic INSERT ... ON CONFLICT DO NOTHING of the events
// that can only be recorded, after which the full rules run for whatever it
// left out (see appendTx). The events travel as arrays (unnest), and
// the projection deltas are aggregated per (poll, candidate) and applied in
// a fixed order, and the rows inserted in the order of (principal, key), so
// concurrent appenders of disjoint principals (the projector's lanes) do
// not deadlock each other. A deadlock or serialization failure that
// PostgreSQL still reports (appenders that share principals) makes the
// whole batch retry, a bounded number of times, and is retryable after.
//
// The database itself refuses UPDATE, DELETE and TRUNCATE on poll_events
// (I5). Store.Rebuild recomputes every tally from the ledger in one
// REPEATABLE READ snapshot and diffs it against the projection; Store.Repair
// rewrites the projection from the ledger while appends go on.
//
// Every change of the catalog (a poll created or closed, a principal
// revoked, a key retired) is an entry of the catalog's change log, written
// by the database's triggers in the change's transaction and numbered in
// commit order (migration 00015); a change that changed nothing writes
// none. A cache of the catalog, like intake's, loads it whole once
// (CatalogHorizon, PollsAfter page by page, Revocations) and then applies
// the changes after the last it applied (CatalogChangesAfter, which reads
// the polls they name in the same statement, and RevocationsOf);
// Store.WatchCatalog tells it, by LISTEN, when there are new ones.
//
// The package knows nothing of Redis or HTTP. Its methods take a context and
// run on a pgx pool; errors from PostgreSQL are translated in one place
// (errors.go: kindOf, which interpretError applies) into this package's
// errors, which callers test with errors.Is and IsRetryable; cli asks the
// same table about a refused connection (IsMissingDatabase,
// IsLoginRefused, IsPasswordRefused).
//
// # Files
//
//   - ledger.go: Config, Store, and runTx, the one way into a transaction
//     (retried on deadlock and serialization failure).
//   - event.go: what Append takes and returns: Event, Outcome with its
//     Status and Reason, InvalidEventError.
//   - append.go: Append and its two steps (appendTx), the optimistic one
//     first.
//   - classify.go: the full rules: decide, the pure per-event decision,
//     and classify, which loads the facts, decides each event and writes
//     the result.
//   - facts.go: the one query that reads what decides each event.
//   - insert.go: the statements that write ledger rows with their
//     projection deltas, and rejection records.
//   - ballots.go: ballots of other kinds than single and polls of answers
//     latest, checked and counted; ballots_latest.go: the read of the
//     ballots a change replaces, and its check under the heads;
//     voters.go: what a Store knows of who has a ballot in a poll of
//     answers latest, so that a first ballot reads nothing.
//   - catalog.go: polls and their choices and eligibility.
//   - poll_ensure.go: EnsurePoll, a poll's creation repeated;
//     poll_bulk.go: EnsurePolls, many polls in one transaction.
//   - principals.go: principals and their bearer tokens, added at random
//     or idempotently under a key (AddPrincipalsOnce), revoked, reissued;
//     revocations.go: what refuses a credential (revoked principals,
//     retired keys, reissued principals' valid-after times).
//   - changes.go: the catalog's change log: the changes after a seq with
//     the polls they name, the horizon a whole load starts from, the trim.
//   - watch.go: WatchCatalog, the LISTEN connection for catalog changes.
//   - results.go: reads of the projection and of one event's record.
//   - rebuild.go: Rebuild and Repair of the projection from the ledger.
//   - merkle.go: the arithmetic of a poll's Merkle log (tlog tiles, the
//     partial tiles kept with the head).
//   - log_store.go: the log kept in the append's transaction: after the
//     inserts, heads locked, new rows numbered (poll_log_leaves), tiles and
//     heads written; Head.
//   - log_build.go: a poll's log hashed again from its rows and
//     definitions in leaf order (rebuild's check), and BuildLogs for logs
//     with no root yet.
//   - log_pass.go: the rebuild's one pass over the ledger: the recount and
//     every poll's log hashed from one read of the rows; log_pass_order.go
//     puts each poll's rows in leaf order, log_pass_hash.go hashes them,
//     log_pass_leaves.go reads the leaves they wait for, and
//     log_pass_latest.go keeps a poll of answers latest's last ballots.
//   - log_verify.go: the rebuild's check of every log against its rows.
//   - log_read.go: inclusion and consistency proofs from the stored tiles.
//   - checkpoints.go: the signed checkpoints of each poll's log.
//   - events.go: Events, many (principal, event id) records in one query.
//   - export.go: Export, the ledger, each poll in its leaf order, its
//     definitions among its rows.
//   - definitions.go: a poll's definition appended to its log by
//     CreatePoll and ClosePoll, and the append's check of its votes
//     against a close that committed while it waited.
//   - errors.go: the package's errors, kindOf (what each PostgreSQL error
//     means here) and interpretError.
package ledger
