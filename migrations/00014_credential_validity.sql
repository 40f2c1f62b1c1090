-- +goose Up
-- tally principal reissue makes a principal's earlier signed tokens stop
-- working: valid_after is the least issue time ("iat") a token of the
-- principal may have, NULL while it was never reissued. A reissue sets it
-- to the next whole second (signed tokens carry whole seconds), later
-- than any token issued before, and issues the new token at that very
-- time. Intake holds it beside the revocations, and hears of a change to
-- it as of a revocation (the catalog's change log, migration 00015).
ALTER TABLE principals ADD COLUMN valid_after timestamptz;

-- admin_actions records each reissue.
ALTER TABLE admin_actions DROP CONSTRAINT admin_actions_action_check;
ALTER TABLE admin_actions ADD CONSTRAINT admin_actions_action_check CHECK (action IN
    ('poll.create', 'poll.close', 'principal.add', 'principal.revoke', 'principal.reissue', 'credential_key.retire'));

-- +goose StatementBegin
CREATE FUNCTION tally_record_principal_reissue() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    LOCK TABLE admin_actions IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO admin_actions (principal_id, db_user, action, target, detail)
    SELECT nullif(current_setting('tally.actor', true), ''), session_user, 'principal.reissue', n.id,
           jsonb_build_object('valid_after', n.valid_after)
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.valid_after IS DISTINCT FROM o.valid_after;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER principals_record_reissue AFTER UPDATE ON principals
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_record_principal_reissue();

-- An OpenID Connect subject's row (made when it is revoked) has no role:
-- its issuer's tokens say its role, token by token (intake's admin claim
-- of that issuer), so a stored one would be made up. Every other
-- principal has one.
ALTER TABLE principals ALTER COLUMN role DROP NOT NULL;
UPDATE principals SET role = NULL WHERE id LIKE 'o-%';
ALTER TABLE principals ADD CONSTRAINT principals_role_known CHECK ((role IS NULL) = (id LIKE 'o-%'));

-- created_by: who minted the principal: the admin that added it through
-- intake's admin routes (the transaction's tally.actor, ledger.ActingAs),
-- NULL when an operator did (the CLI, psql). Revoking an admin can then
-- revoke what it minted, and what they minted (tally principal revoke
-- --minted). Rows made before are NULL: who made them was not recorded.
ALTER TABLE principals ADD COLUMN created_by text COLLATE "C";
ALTER TABLE principals ALTER COLUMN created_by SET DEFAULT nullif(current_setting('tally.actor', true), '');
CREATE INDEX principals_created_by ON principals (created_by) WHERE created_by IS NOT NULL;

-- +goose Down
-- The record of reissues stays readable in admin_actions only while this
-- migration is in place: going down is refused once one was recorded.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM admin_actions WHERE action = 'principal.reissue') THEN
        RAISE EXCEPTION 'admin_actions records a principal.reissue; going down would make that record invalid: restore a backup from before migration 00014 instead';
    END IF;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER principals_record_reissue ON principals;
DROP FUNCTION tally_record_principal_reissue();
ALTER TABLE admin_actions DROP CONSTRAINT admin_actions_action_check;
ALTER TABLE admin_actions ADD CONSTRAINT admin_actions_action_check CHECK (action IN
    ('poll.create', 'poll.close', 'principal.add', 'principal.revoke', 'credential_key.retire'));
DROP INDEX principals_created_by;
ALTER TABLE principals DROP COLUMN created_by;
ALTER TABLE principals DROP CONSTRAINT principals_role_known;
UPDATE principals SET role = 'voter' WHERE role IS NULL;
ALTER TABLE principals ALTER COLUMN role SET NOT NULL;
ALTER TABLE principals DROP COLUMN valid_after;
