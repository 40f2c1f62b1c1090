-- +goose Up
-- The ledger's poll and principal ids keep the id rule (vote.ValidID:
-- 1-64 characters of [A-Za-z0-9_-]) in the database too, as the
-- catalog's tables always did. The ledger checks every event before it
-- inserts it (ledger.validateEvent), so this refuses only a row written
-- around it. The client event id and the candidate id are left to the
-- ledger's check: each id checked costs every row the projector appends
-- (docs/operations.md, "The ledger's id check", has the figures), and a
-- counted candidate is one of its poll's choices, whose table checks it.
-- The rule is a regular expression without a bound, and a length:
-- PostgreSQL runs a bounded repetition such as {1,64} tens of times
-- slower.
--
-- The rows already there are checked as the constraint is added, in this
-- migration's transaction, which holds the ledger's lock meanwhile (the
-- same section gives the time per million rows). A row that breaks the
-- rule fails the migration, naming it, and nothing changes.
ALTER TABLE poll_events ADD CONSTRAINT poll_events_ids_check CHECK (
    poll_id ~ '^[A-Za-z0-9_-]+$' AND octet_length(poll_id) <= 64
    AND principal_id ~ '^[A-Za-z0-9_-]+$' AND octet_length(principal_id) <= 64) NOT VALID;

-- +goose StatementBegin
DO $$
DECLARE
    bad record;
BEGIN
    ALTER TABLE poll_events VALIDATE CONSTRAINT poll_events_ids_check;
EXCEPTION WHEN check_violation THEN
    SELECT seq, poll_id, principal_id INTO bad
    FROM poll_events
    WHERE NOT (poll_id ~ '^[A-Za-z0-9_-]+$' AND octet_length(poll_id) <= 64
        AND principal_id ~ '^[A-Za-z0-9_-]+$' AND octet_length(principal_id) <= 64)
    ORDER BY seq LIMIT 1;
    RAISE EXCEPTION 'poll_events row % breaks the id rule (1-64 characters of [A-Za-z0-9_-]): poll_id %, principal_id %',
        bad.seq, quote_literal(bad.poll_id), quote_literal(bad.principal_id)
        USING ERRCODE = 'check_violation',
              HINT = 'The ledger is append-only and tally never wrote such a row: it was written around tally. Restore the ledger from a backup or an export (tally import), or keep the version before migration 00019.';
END;
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE poll_events DROP CONSTRAINT poll_events_ids_check;
