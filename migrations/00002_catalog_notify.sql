-- +goose Up
-- Intake keeps polls, choices, eligibility and principals in an in-process
-- cache; this trigger tells it (LISTEN tally_catalog, through
-- ledger.Store.WatchCatalog) when any of them changes, so a closed poll or a
-- revoked token takes effect at once.

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

-- +goose Down
DROP TRIGGER principals_notify ON principals;
DROP TRIGGER poll_eligible_notify ON poll_eligible;
DROP TRIGGER poll_choices_notify ON poll_choices;
DROP TRIGGER polls_notify ON polls;
DROP FUNCTION tally_catalog_changed();
