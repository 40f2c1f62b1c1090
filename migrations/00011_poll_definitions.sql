-- +goose Up
-- A poll's definition is a leaf of its own log (docs/audit.md, "The
-- definition leaf"): its title, choices, open window and eligibility (a
-- list by its hash), written when the poll is created, and again, whole,
-- at each change that matters to the count (tally poll close). Each such
-- leaf is a row here, written once, in the transaction that changes the
-- poll and under its log head's lock; the log's leaves then take it in
-- poll_log_leaves as a seq of minus its id (a ledger row's seq is
-- positive), so a poll's leaves stay numbered by first_leaf and position
-- whatever their kind. Polls created before keep their logs as they are:
-- votes only, until a change appends a definition.
CREATE TABLE poll_definitions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    poll_id       text COLLATE "C" NOT NULL REFERENCES polls (id),
    title         text NOT NULL,
    opens_at      timestamptz NOT NULL,
    closes_at     timestamptz,
    eligible_hash bytea CHECK (length(eligible_hash) = 32),
    choices       text[] COLLATE "C" NOT NULL CHECK (cardinality(choices) > 0),
    recorded_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX poll_definitions_poll ON poll_definitions (poll_id, id);
CREATE TRIGGER poll_definitions_no_update_delete
    BEFORE UPDATE OR DELETE ON poll_definitions
    FOR EACH ROW EXECUTE FUNCTION poll_events_append_only();
CREATE TRIGGER poll_definitions_no_truncate
    BEFORE TRUNCATE ON poll_definitions
    FOR EACH STATEMENT EXECUTE FUNCTION poll_events_append_only();

GRANT SELECT, INSERT ON poll_definitions TO tally_daemon;

-- +goose Down
-- Definition leaves are in the logs' tiles and heads, which the version
-- before cannot read back: going down is refused once a definition is
-- logged.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM poll_definitions) THEN
        RAISE EXCEPTION 'poll definitions are logged: the logs hold leaves the version before cannot read; restore a backup from before migration 00011 instead';
    END IF;
END;
$$;
-- +goose StatementEnd
REVOKE ALL ON poll_definitions FROM tally_daemon;
DROP TABLE poll_definitions;
