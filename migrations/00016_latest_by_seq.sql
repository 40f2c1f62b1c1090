-- +goose Up
-- A principal's ballot that counts in a poll of answers latest is found in
-- the ledger itself rather than kept in poll_voters: it is the
-- principal's last row of the poll by seq, which must be its last in the
-- poll's log too. When this migration was written an append took a
-- transaction lock per (poll, principal) to keep the two orders alike. It
-- no longer does: it reads the replaced ballots before it locks the
-- polls' log heads, reads them again under the heads when another append
-- moved a log in between, and runs again if a row of one of its
-- principals has a later seq than its own (ledger/ballots.go,
-- ballots_latest.go). This index finds that row, for the append
-- that takes its figures out and for a ballot's status (superseded, and
-- by which).
CREATE INDEX poll_events_latest ON poll_events (poll_id, principal_id, seq) WHERE latest;

-- poll_voters named each principal's ballot that counts. In an open poll
-- it must be the principal's last row by seq, or the next change would
-- take another ballot's figures out than the one counted; two appends of
-- one principal's ballots that raced could have left it otherwise.
-- +goose StatementBegin
DO $$
DECLARE
    bad record;
BEGIN
    SELECT v.poll_id, v.principal_id INTO bad
    FROM poll_voters v JOIN polls p ON p.id = v.poll_id
    WHERE (p.closes_at IS NULL OR p.closes_at > now())
      AND v.seq <> (SELECT max(e.seq) FROM poll_events e
                    WHERE e.latest AND e.poll_id = v.poll_id AND e.principal_id = v.principal_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'poll %: the ballot counted for principal % is not its last by seq, which this version counts; migrate once the poll has closed (tally poll close), or keep the version before migration 00016 until then', bad.poll_id, bad.principal_id;
    END IF;
END;
$$;
-- +goose StatementEnd

REVOKE ALL ON poll_voters FROM tally_daemon;
DROP TABLE poll_voters;

-- +goose Down
CREATE TABLE poll_voters (
    poll_id      text COLLATE "C" NOT NULL,
    principal_id text COLLATE "C" NOT NULL,
    seq          bigint NOT NULL,
    ballot       text COLLATE "C" NOT NULL,
    PRIMARY KEY (poll_id, principal_id)
);
INSERT INTO poll_voters (poll_id, principal_id, seq, ballot)
SELECT DISTINCT ON (poll_id, principal_id) poll_id, principal_id, seq, coalesce(ballot, candidate_id)
FROM poll_events WHERE latest
ORDER BY poll_id, principal_id, seq DESC;
GRANT SELECT, INSERT, UPDATE ON poll_voters TO tally_daemon;
DROP INDEX poll_events_latest;
