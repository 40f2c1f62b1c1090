package intake

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// problem is an RFC 9457 problem details document.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// problemType names a kind of problem: its type URI and title.
type problemType struct {
	slug  string
	title string
}

// uri is the problem's type as answers name it.
func (pt problemType) uri() string { return problemTypeBaseURI + pt.slug }

// The problems intake answers.
var (
	probBadRequest    = problemType{"invalid-request", "The request body is invalid"}
	probBadID         = problemType{"invalid-id", "The id in the path is invalid"}
	probUnauthorized  = problemType{"unauthorized", "Authentication is required"}
	probNotFound      = problemType{"not-found", "Not found"}
	probUnknownPoll   = problemType{"unknown-poll", "Unknown poll"}
	probMethod        = problemType{"method-not-allowed", "Method not allowed"}
	probKeyReused     = problemType{"key-reused", "The event id was used with another payload"}
	probTooLarge      = problemType{"body-too-large", "The request body is too large"}
	probMediaType     = problemType{"unsupported-media-type", "The request body must be JSON"}
	probPollClosed    = problemType{"poll-closed", "The poll is not open"}
	probInvalidChoice = problemType{"invalid-choice", "The candidate is not a choice of this poll"}
	probInvalidBallot = problemType{"invalid-ballot", "The ballot breaks a rule of this poll"}
	probRateLimited   = problemType{"rate-limited", "Too many requests"}
	probBacklog       = problemType{"backlog-full", "The queue is full"}
	probUnavailable   = problemType{"unavailable", "Temporarily unavailable"}

	// The admin routes' own: a voter's token on an admin route, a poll id
	// taken by another definition, and an intake not set up to do what
	// was asked (no key to sign tokens, or a database login that may not
	// manage the catalog).
	probForbidden  = problemType{"forbidden", "The principal may not do this"}
	probPollExists = problemType{"poll-exists", "A poll with this id exists with another definition"}
	// idempotency-key-reused: POST /v1/principals under an Idempotency-Key
	// the admin used for another request.
	probIdempotencyKeyReused = problemType{"idempotency-key-reused", "The Idempotency-Key was used with another request"}
	// invalid-definition: a poll's ballot or answers mode that breaks a
	// rule of its kind (a parameter out of range or of another kind):
	// well-formed JSON, so not invalid-request, but not a definition.
	probInvalidDefinition = problemType{"invalid-definition", "The poll's definition breaks a rule"}
	probNotConfigured     = problemType{"not-configured", "This intake is not set up for this request"}

	// auth-rate-limited: the client's address made too many failed
	// authentications, so its requests are refused before their token is
	// checked. rate-limited above
	// is a principal's limit: of votes (in Redis) or of reads.
	probAuthRateLimited = problemType{"auth-rate-limited", "Too many failed authentications"}

	// A 503 to a vote says which of two things happened, so a client knows
	// what its retry means. not-queued and backlog-full: the vote was not
	// queued; send it again after Retry-After (with the same event_id, as
	// every retry should). maybe-queued: the vote may have been queued (Redis
	// did not answer in time, or too few replicas confirmed it); send it
	// again with the same event_id, which can never count it twice.
	probNotQueued      = problemType{"not-queued", "The vote was not queued"}
	probMaybeQueued    = problemType{"maybe-queued", "The vote may have been queued"}
	probInternal       = problemType{"internal", "Internal error"}
	problemTypeBaseURI = "urn:tally:problem:"
)

// writeProblem answers a problem+json document. retryAfter, when positive,
// becomes a Retry-After header in whole seconds, rounded up.
func writeProblem(w http.ResponseWriter, status int, pt problemType, detail string, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="tally"`)
	}
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(retryAfter), 10))
	}
	b, _ := json.Marshal(problem{Type: pt.uri(), Title: pt.title, Status: status, Detail: detail})
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, probInternal, "the answer could not be encoded; report this", 0)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
