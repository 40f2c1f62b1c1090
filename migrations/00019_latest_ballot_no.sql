-- +goose Up
-- A row of a poll of answers latest carries its ballot's number among its
-- principal's ballots in the poll: 1 for the first, then 2, 3, ... in the
-- poll's log order. An append numbers its rows after the principal's last
-- it can see (ledger/insert.go), and this unique index refuses a second
-- row of one number: of two appends that raced on one principal, each
-- numbering after the same last ballot, the second to commit fails on it
-- and runs again after the first. So a principal's ballots form one chain
-- in log order, the one with the highest number is its last (the one that
-- counts), and no lock per principal is taken. The index also finds that
-- last ballot, and replaces poll_events_latest (migration 00016).
ALTER TABLE poll_events ADD COLUMN ballot_no integer CHECK (ballot_no > 0);

-- The rows already recorded are numbered in seq order, which migration
-- 00016 made their log order. The ledger refuses UPDATE by a trigger; it
-- is off only inside this migration's transaction, whose ALTER TABLE
-- keeps every other session out until it commits.
ALTER TABLE poll_events DISABLE TRIGGER poll_events_no_update_delete;
UPDATE poll_events e SET ballot_no = n.no
FROM (SELECT seq, row_number() OVER (PARTITION BY poll_id, principal_id ORDER BY seq) AS no
      FROM poll_events WHERE latest) n
WHERE e.seq = n.seq;
ALTER TABLE poll_events ENABLE TRIGGER poll_events_no_update_delete;
ALTER TABLE poll_events ADD CONSTRAINT poll_events_latest_numbered CHECK (latest = (ballot_no IS NOT NULL));

CREATE UNIQUE INDEX poll_events_latest_no ON poll_events (poll_id, principal_id, ballot_no) WHERE latest;
DROP INDEX poll_events_latest;

-- +goose Down
CREATE INDEX poll_events_latest ON poll_events (poll_id, principal_id, seq) WHERE latest;
DROP INDEX poll_events_latest_no;
ALTER TABLE poll_events DROP COLUMN ballot_no;
