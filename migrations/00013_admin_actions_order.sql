-- +goose Up
-- admin_actions' ids in the order their transactions commit, so that a
-- reader following the record (tally admin log --after ID, the id it saw
-- last) misses no action. An id is drawn when a change is recorded, but
-- seen when its transaction commits: of two changes made at once, the one
-- with the higher id could commit first, be read, and the other, once it
-- committed, be skipped for good. Each insert into admin_actions first
-- takes a lock no other insert shares, held until its transaction ends,
-- so no id is drawn while an earlier one is uncommitted. Readers do not
-- wait; writers of the record wait for each other from their first
-- recorded change to their commit (changes of the catalog are few).
-- +goose StatementBegin
CREATE FUNCTION tally_admin_actions_in_commit_order() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    LOCK TABLE admin_actions IN SHARE ROW EXCLUSIVE MODE;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER admin_actions_in_commit_order BEFORE INSERT ON admin_actions
    FOR EACH STATEMENT EXECUTE FUNCTION tally_admin_actions_in_commit_order();

-- +goose Down
DROP TRIGGER admin_actions_in_commit_order ON admin_actions;
DROP FUNCTION tally_admin_actions_in_commit_order();
