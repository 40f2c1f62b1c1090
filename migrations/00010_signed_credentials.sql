-- +goose Up
-- Credentials that verify themselves (package credential): a principal
-- added from now on has no token stored, only the signed token it was
-- given names it, so token_sha256 is kept for the tokens issued before
-- (looked up as before until they are reissued) and is NULL otherwise.
-- A credential key id retired here is refused by every intake, as a
-- revoked principal is: both are held in intake's memory, loaded at start
-- and kept current by the tally_catalog NOTIFY of migration 00002.
ALTER TABLE principals ALTER COLUMN token_sha256 DROP NOT NULL;

CREATE TABLE credential_key_retirements (
    key_id     text PRIMARY KEY CHECK (key_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    retired_at timestamptz NOT NULL DEFAULT now()
);

CREATE TRIGGER credential_key_retirements_notify AFTER INSERT OR UPDATE OR DELETE ON credential_key_retirements
    FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_changed();

GRANT SELECT ON credential_key_retirements TO tally_daemon;

-- +goose Down
REVOKE ALL ON credential_key_retirements FROM tally_daemon;
DROP TABLE credential_key_retirements;
-- A principal without a stored token gets the hash of a random one, which
-- no token has: the schema before signed credentials requires one, and
-- its signed tokens are not read there.
UPDATE principals SET token_sha256 = sha256(convert_to(gen_random_uuid()::text || id, 'UTF8'))
    WHERE token_sha256 IS NULL;
ALTER TABLE principals ALTER COLUMN token_sha256 SET NOT NULL;
