-- +goose Up
-- poll_open_at is the rule "a poll takes a vote received at t": t at or
-- after the poll's opening and, when it has a closing, before it. It is
-- written once here for the ledger's statements (the append's filters,
-- its facts, the check that a log's votes fall in the window), and once in
-- Go as ledger.Poll.OpenAt, which intake uses; the two are held to the same
-- answers by a test in ledger. The auditor's copy in audit stays its own,
-- on purpose: it must not trust the ledger's code. PostgreSQL inlines the
-- function, which is IMMUTABLE and one expression, into each statement, so
-- it costs what the expression costs.
CREATE FUNCTION poll_open_at(opens_at timestamptz, closes_at timestamptz, t timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN opens_at <= t AND (closes_at IS NULL OR t < closes_at);

-- +goose Down
DROP FUNCTION poll_open_at(timestamptz, timestamptz, timestamptz);
