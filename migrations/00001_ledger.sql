-- +goose Up
-- The ledger schema: polls and their choices, principals, the append-only
-- ledger (poll_events), outcome records for events without a tally effect,
-- and the poll_results projection. See ledger/doc.go for the rules.

CREATE TABLE polls (
    id          text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$'),
    title       text NOT NULL,
    opens_at    timestamptz NOT NULL DEFAULT now(),
    closes_at   timestamptz,
    -- 'any': every principal may answer; 'list': only those in poll_eligible.
    eligibility text NOT NULL DEFAULT 'any' CHECK (eligibility IN ('any', 'list')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (closes_at IS NULL OR closes_at >= opens_at)
);

CREATE TABLE poll_choices (
    poll_id      text NOT NULL REFERENCES polls (id),
    candidate_id text NOT NULL CHECK (candidate_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    position     int  NOT NULL,
    PRIMARY KEY (poll_id, candidate_id)
);

-- Principals are authenticated opaque identities. Only the SHA-256 of the
-- bearer token is kept; no e-mail, address or other personal data.
CREATE TABLE principals (
    id           text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$'),
    name         text NOT NULL,
    token_sha256 bytea NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);

CREATE TABLE poll_eligible (
    poll_id      text NOT NULL REFERENCES polls (id),
    principal_id text NOT NULL,
    PRIMARY KEY (poll_id, principal_id)
);

-- The ledger. seq is time-ordered so inserts append to the right edge of the
-- primary key; the random client keys live only in the unique index that
-- enforces I2. principal_id has no foreign key on purpose: a principal can
-- be revoked or purged, and a ledger exported elsewhere imported as it is.
CREATE TABLE poll_events (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    poll_id         text NOT NULL,
    candidate_id    text NOT NULL,
    principal_id    text NOT NULL,
    client_event_id text NOT NULL,
    fingerprint     bytea NOT NULL,
    received_at     timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT poll_events_principal_key_uniq UNIQUE (principal_id, client_event_id),
    CONSTRAINT poll_events_poll_principal_uniq UNIQUE (poll_id, principal_id)
);

-- +goose StatementBegin
CREATE FUNCTION poll_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'poll_events is an append-only ledger: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'Correct a tally with a new event or rebuild the projection (tally rebuild --apply); never edit the ledger.';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER poll_events_no_update_delete
    BEFORE UPDATE OR DELETE ON poll_events
    FOR EACH ROW EXECUTE FUNCTION poll_events_append_only();

CREATE TRIGGER poll_events_no_truncate
    BEFORE TRUNCATE ON poll_events
    FOR EACH STATEMENT EXECUTE FUNCTION poll_events_append_only();

-- One outcome record per (principal, client key) for an event that had no
-- tally effect, so a redelivered rejection is not recorded twice and the
-- status endpoint can answer for it.
CREATE TABLE poll_event_rejections (
    principal_id    text NOT NULL,
    client_event_id text NOT NULL,
    poll_id         text NOT NULL,
    candidate_id    text NOT NULL,
    fingerprint     bytea NOT NULL,
    reason          text NOT NULL CHECK (reason IN
        ('already_responded', 'key_reused', 'poll_closed', 'invalid_choice', 'unknown_poll', 'not_eligible')),
    received_at     timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal_id, client_event_id)
);

-- The projection: for every (poll, candidate), the count of ledger rows (I3).
CREATE TABLE poll_results (
    poll_id      text NOT NULL,
    candidate_id text NOT NULL,
    vote_count   bigint NOT NULL DEFAULT 0 CHECK (vote_count >= 0),
    PRIMARY KEY (poll_id, candidate_id)
);

-- +goose Down
DROP TABLE poll_results;
DROP TABLE poll_event_rejections;
DROP TRIGGER poll_events_no_truncate ON poll_events;
DROP TRIGGER poll_events_no_update_delete ON poll_events;
DROP TABLE poll_events;
DROP FUNCTION poll_events_append_only();
DROP TABLE poll_eligible;
DROP TABLE principals;
DROP TABLE poll_choices;
DROP TABLE polls;
