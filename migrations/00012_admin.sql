-- +goose Up
-- Polls and voters managed over HTTP (intake's admin routes), and the
-- record of every change to them.
--
-- A principal has a role: voter, or admin (it may create and close polls,
-- add and revoke principals). Its signed token names the role too, and
-- intake believes the token; the row is what tally principal reissue
-- issues again.
ALTER TABLE principals ADD COLUMN role text NOT NULL DEFAULT 'voter' CHECK (role IN ('voter', 'admin'));

-- admin_actions: who changed the catalog, what and when, one row a change,
-- written by the triggers below in the transaction that makes the change,
-- whoever makes it (intake's admin routes, the CLI, psql). Who is the
-- authenticated principal when the change came through intake (the
-- transaction's tally.actor setting, ledger.ActingAs) and always the
-- database login (session_user). No role but the owner may write it:
-- the triggers' functions run as the owner (SECURITY DEFINER), so a
-- daemon can neither add a made-up row nor choose the time or the login.
-- Like the ledger it refuses UPDATE, DELETE and TRUNCATE.
CREATE TABLE admin_actions (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    principal_id text COLLATE "C",
    db_user      text NOT NULL,
    action       text NOT NULL CHECK (action IN
        ('poll.create', 'poll.close', 'principal.add', 'principal.revoke', 'credential_key.retire')),
    target       text COLLATE "C" NOT NULL,
    detail       jsonb NOT NULL DEFAULT '{}'
);

-- +goose StatementBegin
CREATE FUNCTION tally_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'The record of administrative actions is kept as it was written; nobody edits it.';
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER admin_actions_no_update_delete
    BEFORE UPDATE OR DELETE ON admin_actions
    FOR EACH ROW EXECUTE FUNCTION tally_append_only();
CREATE TRIGGER admin_actions_no_truncate
    BEFORE TRUNCATE ON admin_actions
    FOR EACH STATEMENT EXECUTE FUNCTION tally_append_only();

-- One function a kind of change; each reads the rows its statement changed
-- (transition tables), so adding 10,000 principals is one insert here.
--
-- Each first locks admin_actions in a mode no other writer shares, held
-- until its transaction ends, so that the ids are in the order the
-- transactions commit and a reader following the record (tally admin log
-- --after ID, the id it saw last) misses no action: without it, of two
-- changes made at once the one with the higher id could commit first, be
-- read, and the other be skipped for good. The lock comes before the
-- INSERT, whose own lock it would otherwise have to be upgraded from (two
-- writers holding that one and waiting for each other: a deadlock).
-- Readers do not wait; writers of the record wait for each other until
-- they commit (changes of the catalog are few).
-- +goose StatementBegin
CREATE FUNCTION tally_record_poll_create() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    LOCK TABLE admin_actions IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO admin_actions (principal_id, db_user, action, target, detail)
    SELECT nullif(current_setting('tally.actor', true), ''), session_user, 'poll.create', n.id,
           jsonb_build_object('opens_at', n.opens_at, 'closes_at', n.closes_at,
                              'eligibility', n.eligibility, 'public_results', n.public_results)
    FROM new_rows n;
    RETURN NULL;
END;
$$;
CREATE FUNCTION tally_record_poll_close() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    LOCK TABLE admin_actions IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO admin_actions (principal_id, db_user, action, target, detail)
    SELECT nullif(current_setting('tally.actor', true), ''), session_user, 'poll.close', n.id,
           jsonb_build_object('closes_at', n.closes_at, 'was', o.closes_at)
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.closes_at IS DISTINCT FROM o.closes_at;
    RETURN NULL;
END;
$$;
CREATE FUNCTION tally_record_principal_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    LOCK TABLE admin_actions IN SHARE ROW EXCLUSIVE MODE;
    -- A revoked row inserted is an OpenID Connect subject's revocation.
    INSERT INTO admin_actions (principal_id, db_user, action, target, detail)
    SELECT nullif(current_setting('tally.actor', true), ''), session_user,
           CASE WHEN n.revoked_at IS NULL THEN 'principal.add' ELSE 'principal.revoke' END, n.id,
           jsonb_build_object('role', n.role)
    FROM new_rows n ORDER BY n.id;
    RETURN NULL;
END;
$$;
CREATE FUNCTION tally_record_principal_revoke() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    LOCK TABLE admin_actions IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO admin_actions (principal_id, db_user, action, target, detail)
    SELECT nullif(current_setting('tally.actor', true), ''), session_user, 'principal.revoke', n.id,
           jsonb_build_object('role', n.role)
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE o.revoked_at IS NULL AND n.revoked_at IS NOT NULL;
    RETURN NULL;
END;
$$;
CREATE FUNCTION tally_record_key_retire() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    LOCK TABLE admin_actions IN SHARE ROW EXCLUSIVE MODE;
    INSERT INTO admin_actions (principal_id, db_user, action, target)
    SELECT nullif(current_setting('tally.actor', true), ''), session_user, 'credential_key.retire', n.key_id
    FROM new_rows n;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER polls_record_create AFTER INSERT ON polls
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_record_poll_create();
CREATE TRIGGER polls_record_close AFTER UPDATE ON polls
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_record_poll_close();
CREATE TRIGGER principals_record_add AFTER INSERT ON principals
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_record_principal_add();
CREATE TRIGGER principals_record_revoke AFTER UPDATE ON principals
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_record_principal_revoke();
CREATE TRIGGER credential_key_retirements_record AFTER INSERT ON credential_key_retirements
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_record_key_retire();

-- tally_admin: the role of an intake that serves the admin routes. It is
-- tally_daemon and may also add polls and principals, close polls and
-- revoke principals; it may not change what a poll asks once created (no
-- UPDATE but of closes_at), nor write admin_actions, which only the
-- triggers write. Made only when missing, as tally_daemon is (00006).
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tally_admin') THEN
        BEGIN
            CREATE ROLE tally_admin NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'tally migrate: the role tally_admin does not exist and % may not create roles', current_user
                    USING ERRCODE = 'insufficient_privilege',
                          HINT = 'Have a superuser run CREATE ROLE tally_admin NOLOGIN, then run tally migrate up again.';
        END;
    END IF;
END;
$$;
-- +goose StatementEnd
GRANT tally_daemon TO tally_admin;
GRANT INSERT ON polls, poll_choices, poll_eligible, principals, credential_key_retirements TO tally_admin;
GRANT UPDATE (closes_at) ON polls TO tally_admin;
GRANT UPDATE (revoked_at) ON principals TO tally_admin;
GRANT SELECT ON admin_actions TO tally_admin;

-- +goose Down
-- The record of administrative actions is not dropped while it holds one:
-- going down would erase who did what.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM admin_actions) THEN
        RAISE EXCEPTION 'admin_actions holds the record of administrative actions; going down would erase it: restore a backup from before migration 00012 instead';
    END IF;
END;
$$;
-- +goose StatementEnd
REVOKE ALL ON admin_actions FROM tally_admin;
REVOKE UPDATE (revoked_at) ON principals FROM tally_admin;
REVOKE UPDATE (closes_at) ON polls FROM tally_admin;
REVOKE INSERT ON polls, poll_choices, poll_eligible, principals, credential_key_retirements FROM tally_admin;
DROP TRIGGER credential_key_retirements_record ON credential_key_retirements;
DROP TRIGGER principals_record_revoke ON principals;
DROP TRIGGER principals_record_add ON principals;
DROP TRIGGER polls_record_close ON polls;
DROP TRIGGER polls_record_create ON polls;
DROP FUNCTION tally_record_key_retire();
DROP FUNCTION tally_record_principal_revoke();
DROP FUNCTION tally_record_principal_add();
DROP FUNCTION tally_record_poll_close();
DROP FUNCTION tally_record_poll_create();
DROP TABLE admin_actions;
DROP FUNCTION tally_append_only();
ALTER TABLE principals DROP COLUMN role;
