-- +goose Up
-- The logs' tiles go from height 8 (256 hashes) to height 4 (16 hashes).
-- At height 8 each head kept partial tiles of up to 255 hashes a level
-- (8 KiB), which PostgreSQL moved out of line (TOAST) and wrote again at
-- every append: a poll's head cost more WAL and disk than its leaves. At
-- height 4 a head's partial tiles are at most 15 hashes a level and stay
-- in its row, and a full tile (512 bytes) stays in its row too. The tree
-- and its roots do not change, so every signed checkpoint still holds;
-- only how its hashes are stored does.
--
-- The tiles are dropped and each head's root set to NULL (its size and its
-- leaves in poll_log_leaves stay): tally migrate up then hashes each
-- poll's rows again, in their leaf order (ledger.Store.BuildLogs), as for
-- a ledger from before the log.
ALTER TABLE poll_log_tiles DISABLE TRIGGER poll_log_tiles_no_update_delete;
DELETE FROM poll_log_tiles;
ALTER TABLE poll_log_tiles ENABLE TRIGGER poll_log_tiles_no_update_delete;
ALTER TABLE poll_log_tiles DROP CONSTRAINT poll_log_tiles_hashes_check,
    ADD CONSTRAINT poll_log_tiles_hashes_check CHECK (length(hashes) = 16 * 32);
-- A tile of 512 bytes stays in its row: no compression to try, no TOAST.
ALTER TABLE poll_log_tiles ALTER COLUMN hashes SET STORAGE PLAIN;
UPDATE poll_log_heads SET root = NULL, partial = '' WHERE root IS NOT NULL AND size > 0;

-- +goose Down
-- The same, for a tally of height 8: its tally migrate up rebuilds them.
ALTER TABLE poll_log_tiles DISABLE TRIGGER poll_log_tiles_no_update_delete;
DELETE FROM poll_log_tiles;
ALTER TABLE poll_log_tiles ENABLE TRIGGER poll_log_tiles_no_update_delete;
ALTER TABLE poll_log_tiles ALTER COLUMN hashes SET STORAGE EXTENDED;
ALTER TABLE poll_log_tiles DROP CONSTRAINT poll_log_tiles_hashes_check,
    ADD CONSTRAINT poll_log_tiles_hashes_check CHECK (length(hashes) = 256 * 32);
UPDATE poll_log_heads SET root = NULL, partial = '' WHERE root IS NOT NULL AND size > 0;
