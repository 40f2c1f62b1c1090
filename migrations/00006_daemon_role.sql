-- +goose Up
-- The role the daemons (intake and projector) run as, so that changing the
-- past takes the owner: tally_daemon may read every table, append to the
-- ledger, the rejections, the log's tiles and its checkpoints, and keep
-- the projection and the log heads, and nothing else. It owns nothing, so
-- it can neither disable the append-only triggers nor set
-- session_replication_role, and it has no UPDATE, DELETE or TRUNCATE on
-- the append-only tables. The operator logs in as a LOGIN role granted
-- tally_daemon (docs/operations.md); poll, principal, migrate and
-- rebuild --apply keep the owner's connection.
--
-- Roles belong to the cluster, not to one database: the role may exist
-- already (another database of tally's on the same server, or made by a
-- superuser beforehand), so it is made only when missing, and two
-- databases migrating at once both succeed. A migrating owner who may not
-- create roles is told to have it made first.
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tally_daemon') THEN
        BEGIN
            CREATE ROLE tally_daemon NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- made at the same moment by a migration of another database
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'tally migrate: the role tally_daemon does not exist and % may not create roles', current_user
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = 'Have a superuser run CREATE ROLE tally_daemon NOLOGIN, then run tally migrate up again.';
        END;
    END IF;
END;
$$;
-- +goose StatementEnd

GRANT USAGE ON SCHEMA public TO tally_daemon;
-- The catalog cache (polls, choices, eligibility, principals, with LISTEN,
-- which needs no grant), the projector's reads, and rebuild's check.
GRANT SELECT ON polls, poll_choices, poll_eligible, principals,
    poll_events, poll_event_rejections, poll_results,
    poll_log_heads, poll_log_tiles, poll_log_checkpoints TO tally_daemon;
-- Append-only: rows are added, never changed.
GRANT INSERT ON poll_events, poll_event_rejections, poll_log_tiles, poll_log_checkpoints TO tally_daemon;
-- Kept up to date by the projector: the projection and each log's head
-- (locked FOR UPDATE by an append, which needs UPDATE).
GRANT INSERT, UPDATE ON poll_results, poll_log_heads TO tally_daemon;
-- poll_events' seq identity.
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO tally_daemon;

-- +goose Down
-- Only this database's grants go: the role stays, since other databases
-- on the server may still grant it (and DROP ROLE would fail while they
-- do). A superuser drops it when no database uses it: DROP ROLE tally_daemon.
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM tally_daemon;
REVOKE ALL ON polls, poll_choices, poll_eligible, principals,
    poll_events, poll_event_rejections, poll_results,
    poll_log_heads, poll_log_tiles, poll_log_checkpoints FROM tally_daemon;
REVOKE USAGE ON SCHEMA public FROM tally_daemon;
