-- +goose Up
-- A poll's leaf order moves out of its ledger rows into poll_log_leaves,
-- so that an append can number its rows after inserting them. Numbering
-- inside the insert (00004's leaf_index) made an append hold its polls'
-- log heads from before its first insert to its commit, and two projector
-- workers appending to one poll took turns for the whole transaction. Now
-- an append inserts its rows as before the log, then locks the heads, and
-- writes one row here per poll it added to: the seqs of its new rows, in
-- leaf order, from the poll's next leaf. The lock is held for that write,
-- the tiles, the head and the commit (docs/audit.md, "Where the log is
-- kept").
--
-- The leaf of index i of a poll is seqs[i - first_leaf + 1] of the row
-- with the greatest first_leaf <= i. id is the order the rows were
-- written in, which is each poll's leaf order: ledger.Store.Export walks
-- it, so an export lists every poll's rows in leaf order and an import
-- reproduces the roots. min_seq and max_seq find the row that holds a
-- given seq (a receipt's leaf index).
CREATE TABLE poll_log_leaves (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    poll_id    text COLLATE "C" NOT NULL,
    first_leaf bigint NOT NULL CHECK (first_leaf >= 0),
    seqs       bigint[] NOT NULL CHECK (cardinality(seqs) > 0),
    min_seq    bigint NOT NULL,
    max_seq    bigint NOT NULL,
    CONSTRAINT poll_log_leaves_first_leaf_uniq UNIQUE (poll_id, first_leaf)
);
CREATE INDEX poll_log_leaves_seq ON poll_log_leaves (poll_id, max_seq);
CREATE TRIGGER poll_log_leaves_no_update_delete
    BEFORE UPDATE OR DELETE ON poll_log_leaves
    FOR EACH ROW EXECUTE FUNCTION poll_events_append_only();
CREATE TRIGGER poll_log_leaves_no_truncate
    BEFORE TRUNCATE ON poll_log_leaves
    FOR EACH STATEMENT EXECUTE FUNCTION poll_events_append_only();

-- The logs already built keep their leaves, 65,536 to a row. A log still
-- to build (its head's root is NULL) gets its leaves when it is built, in
-- the order of seq, as 00004 numbered them.
INSERT INTO poll_log_leaves (poll_id, first_leaf, seqs, min_seq, max_seq)
SELECT e.poll_id, (e.leaf_index / 65536) * 65536, array_agg(e.seq ORDER BY e.leaf_index), min(e.seq), max(e.seq)
FROM poll_events e JOIN poll_log_heads h ON h.poll_id = e.poll_id AND h.root IS NOT NULL
GROUP BY e.poll_id, e.leaf_index / 65536
ORDER BY e.poll_id, 2;

ALTER TABLE poll_events DROP COLUMN leaf_index;

GRANT SELECT, INSERT ON poll_log_leaves TO tally_daemon;

-- +goose Down
REVOKE ALL ON poll_log_leaves FROM tally_daemon;
ALTER TABLE poll_events ADD COLUMN leaf_index bigint CHECK (leaf_index >= 0);
ALTER TABLE poll_events DISABLE TRIGGER poll_events_no_update_delete;
UPDATE poll_events e SET leaf_index = l.first_leaf + s.ord - 1
FROM poll_log_leaves l CROSS JOIN LATERAL unnest(l.seqs) WITH ORDINALITY AS s(seq, ord)
WHERE e.seq = s.seq;
-- Rows of a log still to build take the order of seq, as 00004 gave it.
UPDATE poll_events e SET leaf_index = n.i
FROM (SELECT seq, row_number() OVER (PARTITION BY poll_id ORDER BY seq) - 1 AS i FROM poll_events) n
WHERE e.seq = n.seq AND e.leaf_index IS NULL;
ALTER TABLE poll_events ENABLE TRIGGER poll_events_no_update_delete;
ALTER TABLE poll_events ALTER COLUMN leaf_index SET NOT NULL;
DROP TABLE poll_log_leaves;
