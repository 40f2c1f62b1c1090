// Package problem owns how intake's routes refuse a request: the RFC 9457
// problem+json document and the problem types more than one package of
// intake answers, the JSON answer beside it, and the refusals every route
// shares (an invalid id in the path, an unknown poll, a body that is not
// plain UTF-8 JSON or could not be read), with the phrases their details
// use to name what the client sent. It writes answers only: it never
// authenticates, reads the catalog or touches the ledger.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// document is an RFC 9457 problem details document.
type document struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// Type names a kind of problem: its type URI's last part and its title.
type Type struct {
	Slug  string
	Title string
}

// baseURI is the prefix of every problem type's URI.
const baseURI = "urn:tally:problem:"

// URI is the problem's type as answers name it.
func (t Type) URI() string { return baseURI + t.Slug }

// The problem types that more than one package of intake answers; each
// package declares those only it answers.
var (
	BadRequest      = Type{Slug: "invalid-request", Title: "The request body is invalid"}
	BadID           = Type{Slug: "invalid-id", Title: "The id in the path is invalid"}
	NotFound        = Type{Slug: "not-found", Title: "Not found"}
	UnknownPoll     = Type{Slug: "unknown-poll", Title: "Unknown poll"}
	TooLarge        = Type{Slug: "body-too-large", Title: "The request body is too large"}
	MediaType       = Type{Slug: "unsupported-media-type", Title: "The request body must be JSON"}
	ContentEncoding = Type{Slug: "unsupported-content-encoding", Title: "The request body must not be compressed"}
	RequestTimeout  = Type{Slug: "request-timeout", Title: "The request did not arrive in time"}
	Unavailable     = Type{Slug: "unavailable", Title: "Temporarily unavailable"}
	Internal        = Type{Slug: "internal", Title: "Internal error"}
)

// Write answers a problem+json document. retryAfter, when positive,
// becomes a Retry-After header in whole seconds, rounded up.
func Write(w http.ResponseWriter, status int, t Type, detail string, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="tally"`)
	}
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(RetryAfterSeconds(retryAfter), 10))
	}
	b, _ := json.Marshal(document{Type: t.URI(), Title: t.Title, Status: status, Detail: detail})
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// RetryAfterSeconds rounds d up to whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

// JSON answers v as JSON.
func JSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		Write(w, http.StatusInternalServerError, Internal, "the answer could not be encoded; report this", 0)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
