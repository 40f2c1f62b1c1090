package client

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Problem is intake's refusal of a call: an RFC 9457 problem details
// document (the document's Problem schema), with the answer's
// Retry-After. A call returns it, wrapped, for every answer that is not
// the one it asked for; errors.As finds it:
//
//	var p *client.Problem
//	if errors.As(err, &p) && p.Type == client.ProblemTypeUrnTallyProblemPollClosed { ... }
//
// An answer that is not a problem document (a proxy's error page) is a
// Problem too, with an empty Type, the status's text as Title, and a
// Detail that says what came instead.
type Problem struct {
	// Type is the problem type's URI, urn:tally:problem: and a slug (Slug).
	Type ProblemType `json:"type"`
	// Title is the type's fixed title.
	Title string `json:"title"`
	// Status is the answer's HTTP status.
	Status int `json:"status"`
	// Detail says what was wrong in this request and what to do.
	Detail string `json:"detail"`
	// RetryAfter is the answer's Retry-After (429, 503), 0 without one.
	RetryAfter time.Duration `json:"-"`
}

func (p *Problem) Error() string {
	if p.Type == "" {
		return fmt.Sprintf("intake answered %d %s: %s", p.Status, p.Title, p.Detail)
	}
	return fmt.Sprintf("intake answered %d %s: %s", p.Status, p.Slug(), p.Detail)
}

// Slug is the problem type without its urn:tally:problem: prefix:
// "poll-closed", "rate-limited".
func (p *Problem) Slug() string {
	return strings.TrimPrefix(string(p.Type), "urn:tally:problem:")
}

// maxProblem bounds the problem document read.
const maxProblem = 64 << 10

// readProblem reads the answer resp, which is not the one asked for, as a
// Problem, and closes its body.
func readProblem(resp *http.Response) *Problem {
	defer resp.Body.Close()
	p := &Problem{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProblem))
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case err != nil:
		p.Title, p.Detail = http.StatusText(p.Status), "the answer was cut off: "+err.Error()
	case ct != "application/problem+json":
		p.Title, p.Detail = http.StatusText(p.Status), fmt.Sprintf("the answer is %q, not a problem document: %.200q", ct, body)
	default:
		var doc Problem
		if err := json.Unmarshal(body, &doc); err != nil {
			p.Title, p.Detail = http.StatusText(p.Status), fmt.Sprintf("the problem document does not decode (%v): %.200q", err, body)
			break
		}
		p.Type, p.Title, p.Detail = doc.Type, doc.Title, doc.Detail
	}
	return p
}

// retryAfter reads a Retry-After header: whole seconds or an HTTP date;
// 0 when it is absent or neither.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}
