package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"tally/internal/pause"
)

// retried reports whether an answer of status sends the request again:
// intake took nothing it would not take again (408: the body did not
// arrive; 429, 503: nothing queued, or a vote maybe queued, which its
// event_id keeps from counting twice), or a proxy in front had no answer
// from it (502, 504).
func retried(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// do sends the request build makes until an answer of a status in want
// comes, which it returns for the caller to read, or an answer that is
// not retried, or Config.MaxAttempts requests were sent, or waiting for
// the next would pass Config.MaxElapsed or ctx's deadline. Each attempt
// is a new request from build, with the same body: for a vote, the same
// event_id. The error names what and wraps the last answer's *Problem,
// or the error of a request that got no answer.
func (c *Client) do(ctx context.Context, what string, build func() (*http.Request, error), want ...int) (*http.Response, error) {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		req, err := build()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		req = req.WithContext(ctx)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := c.doer.Do(req)
		var wait time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("%s: %w", what, err)
		case err != nil:
		case slices.Contains(want, resp.StatusCode):
			return resp, nil
		default:
			p := readProblem(resp)
			if !retried(p.Status) {
				return nil, fmt.Errorf("%s: %w", what, p)
			}
			err, wait = p, p.RetryAfter
		}
		if attempt >= c.cfg.MaxAttempts {
			return nil, fmt.Errorf("%s: gave up after %d attempts: %w", what, attempt, err)
		}
		if wait == 0 {
			wait = c.backoff(attempt)
		}
		if over := c.pastBudget(ctx, start, wait); over != "" {
			return nil, fmt.Errorf("%s: gave up after %d attempts: the next, in %s, would pass %s: %w",
				what, attempt, wait.Round(time.Millisecond), over, err)
		}
		if !pause.For(ctx, wait) {
			return nil, fmt.Errorf("%s: %w (while waiting to send it again after: %w)", what, ctx.Err(), err)
		}
	}
}

// backoff is the wait after the attempt-th request got no answer, or one
// without Retry-After: a random duration up to BackoffMin doubled
// attempt-1 times, at most BackoffMax (full jitter, so that clients
// refused together do not come back together).
func (c *Client) backoff(attempt int) time.Duration {
	ceiling := c.cfg.BackoffMax
	if attempt < 32 {
		ceiling = min(c.cfg.BackoffMin<<(attempt-1), c.cfg.BackoffMax)
	}
	return rand.N(ceiling) + 1
}

// pastBudget names the bound a wait of wait would pass, the call having
// started at start: Config.MaxElapsed or ctx's deadline; "" when none.
func (c *Client) pastBudget(ctx context.Context, start time.Time, wait time.Duration) string {
	at := time.Now().Add(wait)
	if at.Sub(start) > c.cfg.MaxElapsed {
		return fmt.Sprintf("the call's bound of %s (Config.MaxElapsed)", c.cfg.MaxElapsed)
	}
	if d, ok := ctx.Deadline(); ok && at.After(d) {
		return "the context's deadline"
	}
	return ""
}
