-- +goose Up
-- Every signed checkpoint of a poll's log: the projector signs a poll's
-- head (size, root) when it changed and keeps the signed note here.
-- Checkpoints are what auditors and voters hold the operator to, so they
-- are never rewritten or removed: the append-only trigger guards them as
-- it guards the ledger. Two projectors may sign the same head; the
-- signature is deterministic (Ed25519), so the second insert finds the
-- identical row.
CREATE TABLE poll_log_checkpoints (
    poll_id    text COLLATE "C" NOT NULL REFERENCES polls (id),
    size       bigint NOT NULL CHECK (size >= 0),
    root       bytea NOT NULL CHECK (length(root) = 32),
    checkpoint text NOT NULL,
    signed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (poll_id, size)
);
CREATE TRIGGER poll_log_checkpoints_no_update_delete
    BEFORE UPDATE OR DELETE ON poll_log_checkpoints
    FOR EACH ROW EXECUTE FUNCTION poll_events_append_only();
CREATE TRIGGER poll_log_checkpoints_no_truncate
    BEFORE TRUNCATE ON poll_log_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION poll_events_append_only();

-- +goose Down
DROP TABLE poll_log_checkpoints;
