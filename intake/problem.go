package intake

import (
	"encoding/json"
	"net/http"
	"time"

	"tally/intake/internal/problem"
)

// This file owns the problem types only intake's own routes answer, and
// its names for what package problem holds for every package of intake
// (the document, the shared types, the phrases of a detail).

// problemType names a kind of problem: its type URI and title.
type problemType = problem.Type

// The problems intake answers.
var (
	probBadRequest    = problem.BadRequest
	probUnauthorized  = problemType{Slug: "unauthorized", Title: "Authentication is required"}
	probNotFound      = problem.NotFound
	probUnknownPoll   = problem.UnknownPoll
	probMethod        = problemType{Slug: "method-not-allowed", Title: "Method not allowed"}
	probKeyReused     = problemType{Slug: "key-reused", Title: "The event id was used with another payload"}
	probTooLarge      = problem.TooLarge
	probPollClosed    = problemType{Slug: "poll-closed", Title: "The poll is not open"}
	probInvalidChoice = problemType{Slug: "invalid-choice", Title: "The candidate is not a choice of this poll"}
	probInvalidBallot = problemType{Slug: "invalid-ballot", Title: "The ballot breaks a rule of this poll"}
	probRateLimited   = problemType{Slug: "rate-limited", Title: "Too many requests"}
	probBacklog       = problemType{Slug: "backlog-full", Title: "The queue is full"}
	probUnavailable   = problem.Unavailable

	// auth-rate-limited: the client's address made too many failed
	// authentications, so its requests are refused before their token is
	// checked. rate-limited above
	// is a principal's limit: of votes (in Redis) or of reads.
	probAuthRateLimited = problemType{Slug: "auth-rate-limited", Title: "Too many failed authentications"}

	// A 503 to a vote says which of two things happened, so a client knows
	// what its retry means. not-queued and backlog-full: the vote was not
	// queued; send it again after Retry-After (with the same event_id, as
	// every retry should). maybe-queued: the vote may have been queued (Redis
	// did not answer in time, or too few replicas confirmed it); send it
	// again with the same event_id, which can never count it twice.
	probNotQueued      = problemType{Slug: "not-queued", Title: "The vote was not queued"}
	probMaybeQueued    = problemType{Slug: "maybe-queued", Title: "The vote may have been queued"}
	probInternal       = problem.Internal
	problemTypeBaseURI = "urn:tally:problem:"
)

// writeProblem answers a problem+json document (problem.Write).
func writeProblem(w http.ResponseWriter, status int, pt problemType, detail string, retryAfter time.Duration) {
	problem.Write(w, status, pt, detail, retryAfter)
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) { problem.JSON(w, status, v) }

// quoteClip quotes what a client sent for a detail (problem.Quote).
func quoteClip(k string) string { return problem.Quote(k) }

// describeID names an invalid id for a detail (problem.DescribeID).
func describeID(s string) string { return problem.DescribeID(s) }

// kindOf names the JSON kind of a token for a detail (problem.KindOf).
func kindOf(tok json.Token) string { return problem.KindOf(tok) }
