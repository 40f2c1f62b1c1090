-- +goose Up
-- The catalog's change log: one row per poll, principal or credential key
-- whose catalog entry a transaction changed, written by the triggers below
-- in that transaction, numbered in the order the transactions commit. An
-- intake holds the catalog in memory; it applies the changes after the
-- last one it applied (ledger.Store.CatalogChangesAfter), reading again
-- only the entries they name, instead of reloading the whole catalog. The
-- NOTIFY on channel tally_catalog now carries the highest seq a
-- transaction wrote, and a transaction that changed nothing (a close of a
-- closed poll, a key retired twice, principals added unrevoked) writes no
-- row and sends no NOTIFY.
--
-- What is recorded:
--   - poll: a poll inserted, updated with another value in any column, or
--     deleted; choices and eligibility rows inserted, updated or deleted,
--     unless the poll's own row was written in the same transaction (its
--     creation is recorded already).
--   - principal: a principal inserted revoked (an OpenID Connect subject's
--     revocation), updated with another value in any column (revoked, its
--     stored token dropped), or deleted. Adding principals unrevoked is
--     not a change of anything intake holds.
--   - key: a credential key retired (or its retirement deleted).
--
-- Like admin_actions (00012), each recording function first locks
-- catalog_changes in a mode no other writer shares, held until its
-- transaction ends, so that the seqs are in commit order: an intake that
-- read up to seq N misses none below it. The triggers are named so that
-- they fire before admin_actions' own on the same table, so every writer
-- takes the two locks in one order.
--
-- The log is trimmed to its last 100,000 rows, every 1,000th seq;
-- catalog_changes_trimmed holds the highest seq trimmed, so that an intake
-- that applied less than it knows it fell behind and loads the catalog
-- whole.
CREATE TABLE catalog_changes (
    seq    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind   text NOT NULL CHECK (kind IN ('poll', 'principal', 'key')),
    target text COLLATE "C" NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE catalog_changes_trimmed (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    through bigint NOT NULL
);
INSERT INTO catalog_changes_trimmed (through) VALUES (0);

-- tally_trim_catalog_changes drops every change but the last keep ones.
-- +goose StatementBegin
CREATE FUNCTION tally_trim_catalog_changes(keep bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    upto bigint;
BEGIN
    LOCK TABLE catalog_changes IN SHARE ROW EXCLUSIVE MODE;
    SELECT max(seq) - keep INTO upto FROM catalog_changes;
    IF upto IS NULL OR upto <= (SELECT through FROM catalog_changes_trimmed) THEN
        RETURN;
    END IF;
    DELETE FROM catalog_changes WHERE seq <= upto;
    UPDATE catalog_changes_trimmed SET through = upto;
END;
$$;

-- tally_catalog_record inserts the changes of kind kind to targets (each
-- once), notifies tally_catalog with the highest seq, and trims the log
-- every 1,000th seq. It takes the log's lock even with nothing to record,
-- so that the order of the locks never depends on what a statement did.
CREATE FUNCTION tally_catalog_record(kind text, targets text[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    first_seq bigint;
    last_seq  bigint;
BEGIN
    LOCK TABLE catalog_changes IN SHARE ROW EXCLUSIVE MODE;
    IF cardinality(targets) = 0 THEN
        RETURN;
    END IF;
    WITH added AS (
        INSERT INTO catalog_changes (kind, target)
        SELECT kind, t FROM (SELECT DISTINCT t FROM unnest(targets) AS u(t)) d ORDER BY t
        RETURNING seq)
    SELECT min(seq), max(seq) INTO first_seq, last_seq FROM added;
    PERFORM pg_notify('tally_catalog', last_seq::text);
    IF last_seq / 1000 > (first_seq - 1) / 1000 THEN
        PERFORM tally_trim_catalog_changes(100000);
    END IF;
END;
$$;

-- Each reads the transition tables its event has (a branch naming one
-- that is absent would fail).
CREATE FUNCTION tally_catalog_polls_changed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    ids text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.id) INTO ids FROM new_rows n;
    ELSIF TG_OP = 'UPDATE' THEN
        SELECT array_agg(n.id) INTO ids FROM new_rows n JOIN old_rows o ON o.id = n.id WHERE n IS DISTINCT FROM o;
    ELSE
        SELECT array_agg(o.id) INTO ids FROM old_rows o;
    END IF;
    PERFORM tally_catalog_record('poll', coalesce(ids, '{}'));
    RETURN NULL;
END;
$$;

-- Choices and eligibility rows name their poll; a poll whose row this
-- transaction wrote (xmin) was recorded by its own trigger.
CREATE FUNCTION tally_catalog_poll_rows_changed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    ids text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.poll_id) INTO ids FROM new_rows n;
    ELSIF TG_OP = 'UPDATE' THEN
        SELECT array_agg(n.poll_id) INTO ids FROM new_rows n;
        ids := ids || (SELECT array_agg(o.poll_id) FROM old_rows o);
    ELSE
        SELECT array_agg(o.poll_id) INTO ids FROM old_rows o;
    END IF;
    PERFORM tally_catalog_record('poll', coalesce((
        SELECT array_agg(DISTINCT i) FROM unnest(ids) AS u(i)
        WHERE NOT EXISTS (SELECT 1 FROM polls p WHERE p.id = i AND p.xmin = pg_current_xact_id()::xid)), '{}'));
    RETURN NULL;
END;
$$;

CREATE FUNCTION tally_catalog_principals_changed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    ids text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.id) INTO ids FROM new_rows n WHERE n.revoked_at IS NOT NULL;
    ELSIF TG_OP = 'UPDATE' THEN
        SELECT array_agg(n.id) INTO ids FROM new_rows n JOIN old_rows o ON o.id = n.id WHERE n IS DISTINCT FROM o;
    ELSE
        SELECT array_agg(o.id) INTO ids FROM old_rows o;
    END IF;
    PERFORM tally_catalog_record('principal', coalesce(ids, '{}'));
    RETURN NULL;
END;
$$;

CREATE FUNCTION tally_catalog_keys_changed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    ids text[];
BEGIN
    IF TG_OP = 'DELETE' THEN
        SELECT array_agg(o.key_id) INTO ids FROM old_rows o;
    ELSE
        SELECT array_agg(n.key_id) INTO ids FROM new_rows n;
    END IF;
    PERFORM tally_catalog_record('key', coalesce(ids, '{}'));
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER polls_notify ON polls;
DROP TRIGGER poll_choices_notify ON poll_choices;
DROP TRIGGER poll_eligible_notify ON poll_eligible;
DROP TRIGGER principals_notify ON principals;
DROP TRIGGER credential_key_retirements_notify ON credential_key_retirements;
DROP FUNCTION tally_catalog_changed();

-- A transition table needs one trigger per event.
CREATE TRIGGER polls_catalog_insert AFTER INSERT ON polls
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_polls_changed();
CREATE TRIGGER polls_catalog_update AFTER UPDATE ON polls
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_polls_changed();
CREATE TRIGGER polls_catalog_delete AFTER DELETE ON polls
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_polls_changed();
CREATE TRIGGER poll_choices_catalog_insert AFTER INSERT ON poll_choices
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_poll_rows_changed();
CREATE TRIGGER poll_choices_catalog_update AFTER UPDATE ON poll_choices
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_poll_rows_changed();
CREATE TRIGGER poll_choices_catalog_delete AFTER DELETE ON poll_choices
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_poll_rows_changed();
CREATE TRIGGER poll_eligible_catalog_insert AFTER INSERT ON poll_eligible
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_poll_rows_changed();
CREATE TRIGGER poll_eligible_catalog_update AFTER UPDATE ON poll_eligible
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_poll_rows_changed();
CREATE TRIGGER poll_eligible_catalog_delete AFTER DELETE ON poll_eligible
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_poll_rows_changed();
CREATE TRIGGER principals_catalog_insert AFTER INSERT ON principals
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_principals_changed();
CREATE TRIGGER principals_catalog_update AFTER UPDATE ON principals
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_principals_changed();
CREATE TRIGGER principals_catalog_delete AFTER DELETE ON principals
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_principals_changed();
CREATE TRIGGER credential_key_retirements_catalog_insert AFTER INSERT ON credential_key_retirements
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_keys_changed();
CREATE TRIGGER credential_key_retirements_catalog_delete AFTER DELETE ON credential_key_retirements
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_keys_changed();

GRANT SELECT ON catalog_changes, catalog_changes_trimmed TO tally_daemon;

-- +goose Down
REVOKE ALL ON catalog_changes, catalog_changes_trimmed FROM tally_daemon;
DROP TRIGGER credential_key_retirements_catalog_delete ON credential_key_retirements;
DROP TRIGGER credential_key_retirements_catalog_insert ON credential_key_retirements;
DROP TRIGGER principals_catalog_delete ON principals;
DROP TRIGGER principals_catalog_update ON principals;
DROP TRIGGER principals_catalog_insert ON principals;
DROP TRIGGER poll_eligible_catalog_delete ON poll_eligible;
DROP TRIGGER poll_eligible_catalog_update ON poll_eligible;
DROP TRIGGER poll_eligible_catalog_insert ON poll_eligible;
DROP TRIGGER poll_choices_catalog_delete ON poll_choices;
DROP TRIGGER poll_choices_catalog_update ON poll_choices;
DROP TRIGGER poll_choices_catalog_insert ON poll_choices;
DROP TRIGGER polls_catalog_delete ON polls;
DROP TRIGGER polls_catalog_update ON polls;
DROP TRIGGER polls_catalog_insert ON polls;
DROP FUNCTION tally_catalog_keys_changed();
DROP FUNCTION tally_catalog_principals_changed();
DROP FUNCTION tally_catalog_poll_rows_changed();
DROP FUNCTION tally_catalog_polls_changed();
DROP FUNCTION tally_catalog_record(text, text[]);
DROP FUNCTION tally_trim_catalog_changes(bigint);
DROP TABLE catalog_changes_trimmed;
DROP TABLE catalog_changes;

-- +goose StatementBegin
CREATE FUNCTION tally_catalog_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tally_catalog', TG_TABLE_NAME);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER polls_notify AFTER INSERT OR UPDATE OR DELETE ON polls
    FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_changed();
CREATE TRIGGER poll_choices_notify AFTER INSERT OR UPDATE OR DELETE ON poll_choices
    FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_changed();
CREATE TRIGGER poll_eligible_notify AFTER INSERT OR UPDATE OR DELETE ON poll_eligible
    FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_changed();
CREATE TRIGGER principals_notify AFTER INSERT OR UPDATE OR DELETE ON principals
    FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_changed();
CREATE TRIGGER credential_key_retirements_notify AFTER INSERT OR UPDATE OR DELETE ON credential_key_retirements
    FOR EACH STATEMENT EXECUTE FUNCTION tally_catalog_changed();
