-- +goose Up
-- Each poll's ledger rows, in ledger order, are the leaves of an RFC 6962
-- Merkle tree (docs/audit.md). This migration gives every ledger row its
-- leaf index and every poll its log head; ledger.Store.BuildLogs (run by
-- `tally migrate up`, and by the first append to a poll otherwise) then
-- hashes the rows that were already there, since the leaf encoding is not
-- SQL's to compute. A head whose root is NULL is one still to build.

-- The leaf index of a row in its poll: dense from 0, in commit order. The
-- rows already in the ledger take the order of seq. Numbering them is the
-- one UPDATE the ledger ever gets, here, by its owner, with the
-- append-only trigger off for the statement; on a large ledger this
-- rewrites the table and takes a while.
ALTER TABLE poll_events ADD COLUMN leaf_index bigint CHECK (leaf_index >= 0);
ALTER TABLE poll_events DISABLE TRIGGER poll_events_no_update_delete;
UPDATE poll_events e SET leaf_index = n.i
FROM (SELECT seq, row_number() OVER (PARTITION BY poll_id ORDER BY seq) - 1 AS i FROM poll_events) n
WHERE e.seq = n.seq;
ALTER TABLE poll_events ENABLE TRIGGER poll_events_no_update_delete;
ALTER TABLE poll_events ALTER COLUMN leaf_index SET NOT NULL;

-- One row per poll: the tree's size and root, and the partial tiles of
-- that size (tlog tiles of height 8: level L's partial tile holds the
-- (size >> 8L) % 256 hashes of tree level 8L past its last full tile; the
-- levels' tiles are concatenated from level 0 up, each one's width follows
-- from size). Appends to a poll lock its row, which makes leaf indexes
-- dense and in commit order; appends to different polls do not meet here.
CREATE TABLE poll_log_heads (
    poll_id    text COLLATE "C" PRIMARY KEY REFERENCES polls (id),
    size       bigint NOT NULL DEFAULT 0 CHECK (size >= 0),
    root       bytea CHECK (length(root) = 32),
    partial    bytea NOT NULL DEFAULT '' CHECK (length(partial) % 32 = 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The full tiles: 256 hashes of one tree level, written once. A tile is
-- never rewritten: the append-only trigger guards it as it guards the
-- ledger.
CREATE TABLE poll_log_tiles (
    poll_id text COLLATE "C" NOT NULL,
    level   smallint NOT NULL CHECK (level >= 0),
    idx     bigint NOT NULL CHECK (idx >= 0),
    hashes  bytea NOT NULL CHECK (length(hashes) = 256 * 32),
    PRIMARY KEY (poll_id, level, idx)
);
CREATE TRIGGER poll_log_tiles_no_update_delete
    BEFORE UPDATE OR DELETE ON poll_log_tiles
    FOR EACH ROW EXECUTE FUNCTION poll_events_append_only();
CREATE TRIGGER poll_log_tiles_no_truncate
    BEFORE TRUNCATE ON poll_log_tiles
    FOR EACH STATEMENT EXECUTE FUNCTION poll_events_append_only();

-- Every poll has a head from its creation: the empty tree's root is the
-- SHA-256 of nothing (RFC 6962 2.1). A poll with rows gets its root from
-- BuildLogs.
INSERT INTO poll_log_heads (poll_id, size, root)
SELECT p.id, count(e.seq), CASE WHEN count(e.seq) = 0 THEN sha256(''::bytea) END
FROM polls p LEFT JOIN poll_events e ON e.poll_id = p.id
GROUP BY p.id;

-- +goose StatementBegin
CREATE FUNCTION poll_log_head_for_new_poll() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO poll_log_heads (poll_id, size, root) VALUES (NEW.id, 0, sha256(''::bytea));
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER polls_log_head AFTER INSERT ON polls
    FOR EACH ROW EXECUTE FUNCTION poll_log_head_for_new_poll();

-- +goose Down
DROP TRIGGER polls_log_head ON polls;
DROP FUNCTION poll_log_head_for_new_poll();
DROP TABLE poll_log_tiles;
DROP TABLE poll_log_heads;
ALTER TABLE poll_events DROP COLUMN leaf_index;
