package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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
