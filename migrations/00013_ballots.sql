-- +goose Up
-- Ballots of every kind (vote/ballot.go): a poll's ballot kind with its
-- parameters and its answers mode, fixed when it is created and part of
-- its definition leaf; a vote's canonical ballot beside its candidate; and
-- the projection's figures beyond a count of votes. Polls, votes and
-- figures from before are single-choice, final, and keep every byte:
-- their candidate_id is their ballot, and the new columns are NULL or 0.
ALTER TABLE polls
    ADD COLUMN ballot_kind text NOT NULL DEFAULT 'single'
        CHECK (ballot_kind IN ('single', 'multiple', 'approve', 'score', 'ranked')),
    ADD COLUMN min_choices int CHECK (min_choices >= 0),
    ADD COLUMN max_choices int CHECK (max_choices >= 1),
    ADD COLUMN max_score   int CHECK (max_score >= 1),
    ADD COLUMN budget      int CHECK (budget >= 1),
    ADD COLUMN answers     text NOT NULL DEFAULT 'final' CHECK (answers IN ('final', 'latest'));

ALTER TABLE poll_definitions
    ADD COLUMN ballot_kind text NOT NULL DEFAULT 'single',
    ADD COLUMN min_choices int,
    ADD COLUMN max_choices int,
    ADD COLUMN max_score   int,
    ADD COLUMN budget      int,
    ADD COLUMN answers     text NOT NULL DEFAULT 'final';

-- A vote of a poll of another kind than single keeps its canonical ballot
-- here and an empty candidate_id; a single choice keeps its candidate_id
-- and no ballot.
ALTER TABLE poll_events ADD COLUMN ballot text COLLATE "C"
    CHECK (ballot IS NULL OR (candidate_id = '' AND ballot ~ '^[\[{]'));

-- A poll of answers "latest" takes a new ballot of a principal until it
-- closes, each one a ledger row marked latest; the ballot that counts is
-- the principal's last in the poll's log, the one poll_voters names. The
-- rule of one row per (poll, principal) holds for the other rows, those
-- of polls whose first answer is final.
ALTER TABLE poll_events ADD COLUMN latest boolean NOT NULL DEFAULT false,
    DROP CONSTRAINT poll_events_poll_principal_uniq;
CREATE UNIQUE INDEX poll_events_poll_principal_uniq ON poll_events (poll_id, principal_id) WHERE NOT latest;

-- The ballot that counts of each principal of a poll of answers "latest":
-- its ledger row and its canonical ballot. An append that records a new
-- ballot replaces the row under its lock, takes the old ballot's figures
-- out of the projection and adds the new one's, in one transaction.
CREATE TABLE poll_voters (
    poll_id      text COLLATE "C" NOT NULL,
    principal_id text COLLATE "C" NOT NULL,
    seq          bigint NOT NULL,
    ballot       text COLLATE "C" NOT NULL,
    PRIMARY KEY (poll_id, principal_id)
);

ALTER TABLE poll_event_rejections ADD COLUMN ballot text COLLATE "C",
    DROP CONSTRAINT poll_event_rejections_reason_check,
    ADD CONSTRAINT poll_event_rejections_reason_check CHECK (reason IN
        ('already_responded', 'key_reused', 'poll_closed', 'invalid_choice', 'invalid_ballot', 'unknown_poll', 'not_eligible'));

-- The projection's figures per (poll, choice) beyond vote_count, each a
-- sum over the ballots that count (vote/count.go).
ALTER TABLE poll_results
    ADD COLUMN yes_count     bigint NOT NULL DEFAULT 0 CHECK (yes_count >= 0),
    ADD COLUMN no_count      bigint NOT NULL DEFAULT 0 CHECK (no_count >= 0),
    ADD COLUMN abstain_count bigint NOT NULL DEFAULT 0 CHECK (abstain_count >= 0),
    ADD COLUMN score_sum     bigint NOT NULL DEFAULT 0 CHECK (score_sum >= 0),
    ADD COLUMN borda_sum     bigint NOT NULL DEFAULT 0 CHECK (borda_sum >= 0);

-- A ranked poll's pairwise matrix: the ballots that rank winner above
-- loser. A cell no ballot added to has no row.
CREATE TABLE poll_pairwise (
    poll_id text COLLATE "C" NOT NULL,
    winner  text COLLATE "C" NOT NULL,
    loser   text COLLATE "C" NOT NULL,
    ballots bigint NOT NULL CHECK (ballots >= 0),
    PRIMARY KEY (poll_id, winner, loser)
);

-- The ballots counted per poll of another kind than single (a single
-- choice's ballots are its votes).
CREATE TABLE poll_ballots (
    poll_id text COLLATE "C" PRIMARY KEY,
    ballots bigint NOT NULL CHECK (ballots >= 0)
);

GRANT SELECT, INSERT, UPDATE ON poll_pairwise, poll_ballots, poll_voters TO tally_daemon;

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM polls WHERE ballot_kind <> 'single' OR answers <> 'final')
       OR EXISTS (SELECT 1 FROM poll_event_rejections WHERE reason = 'invalid_ballot') THEN
        RAISE EXCEPTION 'polls of other ballot kinds or answers modes exist: the version before cannot count them; restore a backup from before migration 00013 instead';
    END IF;
END;
$$;
-- +goose StatementEnd
REVOKE ALL ON poll_pairwise, poll_ballots, poll_voters FROM tally_daemon;
DROP TABLE poll_voters;
DROP INDEX poll_events_poll_principal_uniq;
ALTER TABLE poll_events DROP COLUMN latest,
    ADD CONSTRAINT poll_events_poll_principal_uniq UNIQUE (poll_id, principal_id);
DROP TABLE poll_ballots;
DROP TABLE poll_pairwise;
ALTER TABLE poll_results
    DROP COLUMN yes_count, DROP COLUMN no_count, DROP COLUMN abstain_count,
    DROP COLUMN score_sum, DROP COLUMN borda_sum;
ALTER TABLE poll_event_rejections DROP COLUMN ballot,
    DROP CONSTRAINT poll_event_rejections_reason_check,
    ADD CONSTRAINT poll_event_rejections_reason_check CHECK (reason IN
        ('already_responded', 'key_reused', 'poll_closed', 'invalid_choice', 'unknown_poll', 'not_eligible'));
ALTER TABLE poll_events DROP COLUMN ballot;
ALTER TABLE poll_definitions
    DROP COLUMN ballot_kind, DROP COLUMN min_choices, DROP COLUMN max_choices,
    DROP COLUMN max_score, DROP COLUMN budget, DROP COLUMN answers;
ALTER TABLE polls
    DROP COLUMN ballot_kind, DROP COLUMN min_choices, DROP COLUMN max_choices,
    DROP COLUMN max_score, DROP COLUMN budget, DROP COLUMN answers;
