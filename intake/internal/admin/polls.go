package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"tally/intake/internal/problem"
	"tally/ledger"
	"tally/vote"
)

// This file owns the admin routes of polls, for the applications that
// host them: create (idempotent by poll id), close (idempotent), list and
// read. Each write goes through the ledger's own function, the one tally
// poll runs, so a poll created or closed here writes its definition leaf
// and its admin_actions row exactly as the CLI's does. An admin's reads
// ask PostgreSQL, not the catalog intake holds, so that a poll just
// created reads back at once. A voter may read one poll it may vote on,
// from the catalog, as its votes are checked: a client cannot draw a
// ballot without the poll's kind and choices.

// Route templates of the poll routes, also the route labels of the
// metrics.
const (
	RoutePolls     = "/v1/polls"
	RoutePoll      = "/v1/polls/{poll_id}"
	RoutePollClose = "/v1/polls/{poll_id}/close"
)

// pollAnswer is a poll as the admin routes answer it.
type pollAnswer struct {
	PollID        string     `json:"poll_id"`
	Title         string     `json:"title"`
	State         string     `json:"state"`
	OpensAt       time.Time  `json:"opens_at"`
	ClosesAt      *time.Time `json:"closes_at"`
	Eligibility   string     `json:"eligibility"`
	Eligible      []string   `json:"eligible,omitempty"`
	Choices       []string   `json:"choices"`
	PublicResults bool       `json:"public_results"`
	Ballot        ballotSpec `json:"ballot"` // every parameter of its kind, defaults filled in
	Answers       string     `json:"answers"`
	CreatedAt     time.Time  `json:"created_at"`
	Total         *int64     `json:"total,omitempty"`
}

func newPollAnswer(p ledger.Poll, now time.Time) pollAnswer {
	spec := p.BallotRules().Spec()
	return pollAnswer{PollID: p.ID, Title: p.Title, State: p.State(now), OpensAt: p.OpensAt, ClosesAt: p.ClosesAt,
		Eligibility: p.Eligibility, Eligible: p.Eligible, Choices: p.Choices, PublicResults: p.PublicResults,
		Ballot:  ballotSpec{Kind: spec.Kind, MinChoices: spec.MinChoices, MaxChoices: spec.MaxChoices, MaxScore: spec.MaxScore, Budget: spec.Budget},
		Answers: spec.Answers, CreatedAt: p.CreatedAt}
}

// CreatePoll takes POST /v1/polls: 201 with Location for a new poll,
// 200 when the poll exists as asked, 409 poll-exists when it exists
// otherwise. A body that is an array is many polls (createPolls).
func (a *Admin) CreatePoll(w http.ResponseWriter, r *http.Request) {
	admin, ok := a.admin(w, r)
	if !ok {
		return
	}
	body, ok := readAdminBytes(w, r)
	if !ok {
		return
	}
	if bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
		a.createPolls(w, r, admin, body)
		return
	}
	var q pollRequest
	if !decodeAdminBody(w, body, &q, pollShape) {
		return
	}
	p, err := q.poll()
	created := false
	if err == nil {
		err = a.ask(r, func() error {
			var err error
			created, err = a.store.EnsurePoll(ledger.ActingAs(r.Context(), admin.ID), p)
			return err
		})
	}
	if status, prob, detail, ok := pollRefused(err); ok && status != http.StatusBadRequest {
		problem.Write(w, status, prob, detail, 0)
		return
	}
	if err != nil {
		a.writeFailed(w, r, err)
		return
	}
	if created {
		a.logWrite(r, admin, "poll.create", p.ID)
	}
	a.catchUpAfter(r)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	a.writePoll(w, r, p.ID, status)
}

// pollRefused is the answer to a poll's own refusal: 422 for a rule of
// definitions broken or a stated limit passed, 409 for another definition
// under its id, 400 for another invalid field. ok is false for any other
// error (none, or the request's as a whole).
func pollRefused(err error) (status int, prob problem.Type, detail string, ok bool) {
	var conflict *ledger.DefinitionConflict
	var rule *vote.RuleError
	var field *ledger.FieldError
	switch {
	case errors.As(err, &rule):
		return http.StatusUnprocessableEntity, probInvalidDefinition,
			fmt.Sprintf("the field %q breaks a rule of poll definitions: %s", rule.Field, rule.Reason), true
	case errors.As(err, &conflict):
		return http.StatusConflict, probPollExists, fmt.Sprintf(
			"poll %q exists with another %s than this request's: choose another poll_id, or GET /v1/polls/%s to see it",
			conflict.PollID, conflict.Field, conflict.PollID), true
	case errors.As(err, &field) && field.Limit > 0:
		return http.StatusUnprocessableEntity, probInvalidDefinition,
			fmt.Sprintf("the field %q is over its limit of %d: %s", field.Field, field.Limit, field.Reason), true
	case errors.As(err, &field):
		return http.StatusBadRequest, problem.BadRequest, fmt.Sprintf("the field %q is invalid: %s", field.Field, field.Reason), true
	}
	return 0, problem.Type{}, "", false
}

// ClosePoll takes POST /v1/polls/{poll_id}/close, optionally
// {"at"}: the poll closes then (default now), or at its earlier closing
// time. Closing again changes nothing.
func (a *Admin) ClosePoll(w http.ResponseWriter, r *http.Request) {
	admin, ok := a.admin(w, r)
	if !ok {
		return
	}
	id, ok := problem.PathID(w, r, "poll_id", "poll id")
	if !ok {
		return
	}
	var q struct {
		At *string `json:"at"`
	}
	if !readAdminBody(w, r, &q, `{"at": an RFC 3339 time}, or no body to close it now`, true) {
		return
	}
	at, err := parseTimeField("at", q.At)
	if err == nil {
		if at == nil {
			now := time.Now()
			at = &now
		}
		err = a.ask(r, func() error { return a.store.ClosePoll(ledger.ActingAs(r.Context(), admin.ID), id, *at) })
	}
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		problem.WriteUnknownPoll(w, id)
	case err != nil:
		a.writeFailed(w, r, err)
	default:
		a.logWrite(r, admin, "poll.close", id)
		a.catchUpAfter(r)
		a.writePoll(w, r, id, http.StatusOK)
	}
}

// ListPolls takes GET /v1/polls: every poll with its state and
// total, oldest first.
func (a *Admin) ListPolls(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.admin(w, r); !ok {
		return
	}
	var polls []ledger.Poll
	var totals map[string]int64
	err := a.ask(r, func() error {
		var err error
		if polls, err = a.store.Polls(r.Context()); err == nil {
			totals, err = a.store.PollTotals(r.Context())
		}
		return err
	})
	if err != nil {
		a.ledger.LedgerFailed(w, r, "poll list failed", err)
		return
	}
	now := time.Now()
	out := struct {
		Polls []pollAnswer `json:"polls"`
	}{Polls: make([]pollAnswer, len(polls))}
	for i, p := range polls {
		pa := newPollAnswer(p, now)
		pa.Eligible = nil // the list says "list"; GET /v1/polls/{poll_id} names them
		total := totals[p.ID]
		pa.Total = &total
		out.Polls[i] = pa
	}
	problem.JSON(w, http.StatusOK, out)
}

// GetPoll takes GET /v1/polls/{poll_id}: to an admin its definition
// and total, read from PostgreSQL; to a voter, its definition as the
// catalog holds it without its eligibility list, if it may vote on it, and
// else the 404 of an unknown poll.
func (a *Admin) GetPoll(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	id, ok := problem.PathID(w, r, "poll_id", "poll id")
	if !ok {
		return
	}
	if p.Role == ledger.RoleAdmin {
		a.writePoll(w, r, id, http.StatusOK)
		return
	}
	poll, mayVote, err := a.catalog.Poll(id, p.ID)
	switch {
	case errors.Is(err, ledger.ErrNotFound) || err == nil && !mayVote:
		problem.WriteUnknownPoll(w, id) // a hidden poll is not to be told apart from an unknown one
	case err != nil:
		a.ledger.LedgerFailed(w, r, "poll lookup failed", err)
	default:
		pa := newPollAnswer(poll, time.Now())
		pa.Eligible = nil
		problem.JSON(w, http.StatusOK, pa)
	}
}

// writePoll answers poll id as it now stands, with status; a 201 with
// the poll's Location.
func (a *Admin) writePoll(w http.ResponseWriter, r *http.Request, id string, status int) {
	var p ledger.Poll
	var res ledger.Results
	err := a.ask(r, func() error {
		var err error
		if p, err = a.store.Poll(r.Context(), id); err == nil {
			res, err = a.store.Results(r.Context(), id)
		}
		return err
	})
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		problem.WriteUnknownPoll(w, id)
	case err != nil:
		a.ledger.LedgerFailed(w, r, "poll lookup failed", err)
	default:
		pa := newPollAnswer(p, time.Now())
		pa.Total = &res.Total
		if status == http.StatusCreated {
			w.Header().Set("Location", "/v1/polls/"+id)
		}
		problem.JSON(w, status, pa)
	}
}

// logWrite logs an admin write that succeeded: who asked, what, on what
// (admin_actions holds what it changed).
func (a *Admin) logWrite(r *http.Request, admin Principal, action, target string) {
	a.log.LogAttrs(r.Context(), slog.LevelInfo, "admin write", slog.String("action", action),
		slog.String("target", target), slog.String("principal", admin.ID))
}

// catchUpAfter brings what this intake holds in memory up to date after
// its own admin write, by the catalog's change log, so that the change
// holds here once it is answered (a poll created takes votes, a revoked
// principal is refused); other intakes hear of it by NOTIFY, within
// milliseconds. A write that changed nothing left no change to read. A
// catch-up that failed is logged: the NOTIFY and the periodic check still
// come, and it tells pgState nothing (a slow read is not an outage). It
// takes at most Config.PostgresTimeout of the request's time, so that the
// answer, which reads the poll back, has the rest.
func (a *Admin) catchUpAfter(r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.PostgresTimeout)
	defer cancel()
	if err := a.ledger.CatchUp(ctx); err != nil {
		problem.Failed(a.log, r, "could not apply the catalog's changes after an admin write; they follow within the catalog refresh period", err)
	}
}

// ask runs a read or write of the admin routes through Ledger.Ask, with
// the request's context.
func (a *Admin) ask(r *http.Request, fn func() error) error { return a.ledger.Ask(r.Context(), fn) }
