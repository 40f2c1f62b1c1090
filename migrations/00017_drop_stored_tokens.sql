-- +goose Up
-- Tokens of the stored kind ("tly_...", looked up by their SHA-256) were
-- never taken by a release: every principal authenticates with a signed
-- credential (package credential) or an OpenID Connect issuer's token,
-- neither of which needs a stored secret. intake answers a "tly_" token
-- 401 and says to reissue a signed credential (tally principal reissue),
-- so the column that held the hashes goes. Revocations, valid_after,
-- roles and created_by stay: signed credentials are checked against them.
ALTER TABLE principals DROP COLUMN token_sha256;

-- +goose Down
-- The column comes back as migration 00010 left it: nullable (principals
-- with signed credentials have no stored token), unique, 32 bytes. No
-- hash is restored: the tokens of the stored kind stay unusable.
ALTER TABLE principals ADD COLUMN token_sha256 bytea UNIQUE CHECK (length(token_sha256) = 32);
