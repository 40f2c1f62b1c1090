package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"tally/client"
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

// intakes are the client package's Clients of the targets, in their
// order, each sending its requests through client and making one attempt
// per call: the session's own loop sends a vote again, so that it counts
// every request and turns each retry to the next target.
func intakes(cfg Config, hc *http.Client) ([]*client.Client, error) {
	cs := make([]*client.Client, len(cfg.Targets))
	for i, target := range cfg.Targets {
		c, err := client.New(client.Config{BaseURL: target, HTTPClient: hc, MaxAttempts: 1})
		if err != nil {
			return nil, fmt.Errorf("loadtest: target %s: %w", target, err)
		}
		cs[i] = c
	}
	return cs, nil
}

// post sends one vote to the target-th intake as token, once, and reads
// the answer whole, so the connection can be used again.
func (s *Session) post(ctx context.Context, target int, token string, v client.Vote) answer {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	acc, err := s.intakes[target].As(token).Vote(ctx, v)
	a := answer{latency: time.Since(start)}
	var p *client.Problem
	switch {
	case err == nil:
		a.status, a.eventID = http.StatusAccepted, acc.EventId
	case errors.As(err, &p):
		a.status, a.slug, a.retryAfter = p.Status, p.Slug(), p.RetryAfter
	default:
		// No answer, or a 202 cut off: as good as none.
		a.err = err
	}
	return a
}

// retryable reports whether a vote is sent again after a: no answer, 429,
// or a 5xx.
func retryable(a answer) bool {
	return a.status == 0 || a.status == http.StatusTooManyRequests || a.status >= 500
}
