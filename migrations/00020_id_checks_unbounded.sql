-- +goose Up
-- The catalog's id checks (polls, choices, principals, retired keys) say
-- the id rule as 00019's does: a regular expression without a bound, and
-- a length. PostgreSQL runs the bounded repetition {1,64} tens of
-- times slower (docs/operations.md, "The ledger's id check"), and every
-- poll created, each of its choices and each principal added paid it. The
-- rule is the same, so the rows there keep it.
ALTER TABLE polls DROP CONSTRAINT polls_id_check,
    ADD CONSTRAINT polls_id_check CHECK (id ~ '^[A-Za-z0-9_-]+$' AND octet_length(id) <= 64);
ALTER TABLE poll_choices DROP CONSTRAINT poll_choices_candidate_id_check,
    ADD CONSTRAINT poll_choices_candidate_id_check CHECK (candidate_id ~ '^[A-Za-z0-9_-]+$' AND octet_length(candidate_id) <= 64);
ALTER TABLE principals DROP CONSTRAINT principals_id_check,
    ADD CONSTRAINT principals_id_check CHECK (id ~ '^[A-Za-z0-9_-]+$' AND octet_length(id) <= 64);
ALTER TABLE credential_key_retirements DROP CONSTRAINT credential_key_retirements_key_id_check,
    ADD CONSTRAINT credential_key_retirements_key_id_check CHECK (key_id ~ '^[A-Za-z0-9_-]+$' AND octet_length(key_id) <= 64);

-- +goose Down
ALTER TABLE polls DROP CONSTRAINT polls_id_check,
    ADD CONSTRAINT polls_id_check CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$');
ALTER TABLE poll_choices DROP CONSTRAINT poll_choices_candidate_id_check,
    ADD CONSTRAINT poll_choices_candidate_id_check CHECK (candidate_id ~ '^[A-Za-z0-9_-]{1,64}$');
ALTER TABLE principals DROP CONSTRAINT principals_id_check,
    ADD CONSTRAINT principals_id_check CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$');
ALTER TABLE credential_key_retirements DROP CONSTRAINT credential_key_retirements_key_id_check,
    ADD CONSTRAINT credential_key_retirements_key_id_check CHECK (key_id ~ '^[A-Za-z0-9_-]{1,64}$');
