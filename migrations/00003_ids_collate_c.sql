-- +goose Up
-- Ids are byte strings of [A-Za-z0-9_-], not words: compare them bytewise.
-- Under a linguistic collation (en_US.UTF-8, even C.UTF-8 on PostgreSQL
-- 15) every index probe and sort on an id goes through strcoll; with
-- COLLATE "C" it is memcmp, which makes batch appends faster.
-- The order of ids is the same for all but mixed-case ids (C puts upper
-- case first). Every id column changes together, so joins and foreign keys
-- compare like with like and keep using their indexes. Indexes on these
-- columns are rebuilt: on a large ledger this migration takes a while.

ALTER TABLE polls ALTER COLUMN id TYPE text COLLATE "C";
ALTER TABLE poll_choices
    ALTER COLUMN poll_id TYPE text COLLATE "C",
    ALTER COLUMN candidate_id TYPE text COLLATE "C";
ALTER TABLE principals ALTER COLUMN id TYPE text COLLATE "C";
ALTER TABLE poll_eligible
    ALTER COLUMN poll_id TYPE text COLLATE "C",
    ALTER COLUMN principal_id TYPE text COLLATE "C";
ALTER TABLE poll_events
    ALTER COLUMN poll_id TYPE text COLLATE "C",
    ALTER COLUMN candidate_id TYPE text COLLATE "C",
    ALTER COLUMN principal_id TYPE text COLLATE "C",
    ALTER COLUMN client_event_id TYPE text COLLATE "C";
ALTER TABLE poll_event_rejections
    ALTER COLUMN principal_id TYPE text COLLATE "C",
    ALTER COLUMN client_event_id TYPE text COLLATE "C",
    ALTER COLUMN poll_id TYPE text COLLATE "C",
    ALTER COLUMN candidate_id TYPE text COLLATE "C";
ALTER TABLE poll_results
    ALTER COLUMN poll_id TYPE text COLLATE "C",
    ALTER COLUMN candidate_id TYPE text COLLATE "C";

-- +goose Down
ALTER TABLE poll_results
    ALTER COLUMN poll_id TYPE text COLLATE "default",
    ALTER COLUMN candidate_id TYPE text COLLATE "default";
ALTER TABLE poll_event_rejections
    ALTER COLUMN principal_id TYPE text COLLATE "default",
    ALTER COLUMN client_event_id TYPE text COLLATE "default",
    ALTER COLUMN poll_id TYPE text COLLATE "default",
    ALTER COLUMN candidate_id TYPE text COLLATE "default";
ALTER TABLE poll_events
    ALTER COLUMN poll_id TYPE text COLLATE "default",
    ALTER COLUMN candidate_id TYPE text COLLATE "default",
    ALTER COLUMN principal_id TYPE text COLLATE "default",
    ALTER COLUMN client_event_id TYPE text COLLATE "default";
ALTER TABLE poll_eligible
    ALTER COLUMN poll_id TYPE text COLLATE "default",
    ALTER COLUMN principal_id TYPE text COLLATE "default";
ALTER TABLE principals ALTER COLUMN id TYPE text COLLATE "default";
ALTER TABLE poll_choices
    ALTER COLUMN poll_id TYPE text COLLATE "default",
    ALTER COLUMN candidate_id TYPE text COLLATE "default";
ALTER TABLE polls ALTER COLUMN id TYPE text COLLATE "default";
