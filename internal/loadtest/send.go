package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// newClient returns an HTTP client that keeps up to concurrency
// connections alive per target.
func newClient(cfg Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = cfg.Concurrency * len(cfg.Targets)
	tr.MaxIdleConnsPerHost = cfg.Concurrency
	tr.IdleConnTimeout = 30 * time.Second
	return &http.Client{Transport: tr}
}

// voteBody is the body of POST /v1/votes.
type voteBody struct {
	EventID     string `json:"event_id"`
	PollID      string `json:"poll_id"`
	CandidateID string `json:"candidate_id"`
}

// maxAnswer bounds the answer body read.
const maxAnswer = 64 << 10

// post sends one vote to target and reads the answer whole, so the
// connection can be used again.
func (s *Session) post(ctx context.Context, target, token string, body []byte) answer {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"/v1/votes", bytes.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.client.Do(req)
	if err != nil {
		return answer{err: err, latency: time.Since(start)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	a := answer{status: resp.StatusCode, latency: time.Since(start)}
	if err != nil {
		// The status came but the answer was cut off: as good as none.
		return answer{err: err, latency: a.latency}
	}
	switch {
	case a.status == http.StatusAccepted:
		var acc struct {
			EventID string `json:"event_id"`
		}
		if json.Unmarshal(raw, &acc) == nil {
			a.eventID = acc.EventID
		}
	default:
		var prob struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(raw, &prob) == nil && prob.Type != "" {
			a.slug = prob.Type[strings.LastIndexByte(prob.Type, ':')+1:]
		}
		a.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return a
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
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

// retryable reports whether a vote is sent again after a: no answer, 429,
// or a 5xx.
func retryable(a answer) bool {
	return a.status == 0 || a.status == http.StatusTooManyRequests || a.status >= 500
}

// send sends one vote until it gets a final answer or MaxAttempts requests
// were made. A request without an answer is sent again with the same key
// after a jittered backoff; a 429 or 5xx after its Retry-After (or the
// backoff when it has none). Each request goes to the next target.
func (s *Session) send(ctx context.Context, tk task, turn int) {
	p := s.principals[tk.principal]
	body, _ := json.Marshal(voteBody{EventID: keyID(tk.key), PollID: s.pollID(int(tk.round)), CandidateID: candidateID(int(tk.candidate))})
	ambiguous := false
	var a answer
	for attempt := 1; ; attempt++ {
		s.requests.Add(1)
		a = s.post(ctx, s.cfg.Targets[(turn+attempt-1)%len(s.cfg.Targets)], p.token, body)
		if !retryable(a) || attempt >= s.cfg.MaxAttempts || ctx.Err() != nil {
			break
		}
		if !a.definite() {
			ambiguous = true
		}
		s.truth.noteRetry(a)
		wait := s.backoff(attempt)
		if a.retryAfter > 0 {
			wait = min(a.retryAfter, s.cfg.MaxRetryAfter)
		}
		if a.status == 0 && !errors.Is(a.err, context.Canceled) {
			s.cfg.Logger.DebugContext(ctx, "vote got no answer; sending it again", "key", keyID(tk.key), "attempt", attempt, "error", a.err.Error())
		}
		if !sleep(ctx, wait) {
			break
		}
	}
	s.truth.record(tk, a, ambiguous, time.Now())
	s.sent.Add(1)
	if a.status == http.StatusAccepted {
		s.acceptedN.Add(1)
	}
}

// backoff is the wait before the attempt+1-th request of a vote that got no
// answer: doubling from BackoffMin up to BackoffMax, with full jitter.
func (s *Session) backoff(attempt int) time.Duration {
	d := s.cfg.BackoffMin << min(attempt-1, 20)
	if d <= 0 || d > s.cfg.BackoffMax {
		d = s.cfg.BackoffMax
	}
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// sleep waits d or until ctx is done, and reports whether it waited d.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
