-- +goose Up
-- A poll whose results anyone may see, without a token: its live results
-- page (GET /polls/{poll_id}) and its live stream (GET
-- /v1/polls/{poll_id}/live) on intake. tally poll create --public-results
-- sets it; every poll made before this migration stays not public. The
-- daemons' role reads it through its SELECT on polls, and the live stream
-- is fed by pg_notify('tally_results', poll_id) from the append's own
-- transaction (ledger/notify.go), which needs no grant.
ALTER TABLE polls ADD COLUMN public_results boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE polls DROP COLUMN public_results;
