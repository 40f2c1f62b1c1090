package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Config is a Client's settings. The zero value of a field is its default.
type Config struct {
	// BaseURL is intake's, e.g. "http://127.0.0.1:8080". Required.
	BaseURL string
	// Token is the bearer token sent with every call; "" sends none (the
	// results of a poll whose results are public). Client.As gives a
	// Client that sends another.
	Token string
	// HTTPClient sends the requests. Default: an http.Client with a
	// timeout of 10s per request.
	HTTPClient HttpRequestDoer
	// MaxAttempts bounds the requests of one call: 1 sends each once.
	// Default 5.
	MaxAttempts int
	// MaxElapsed bounds one call, its waits included: no attempt is
	// started that would wait past it. Default 30s.
	MaxElapsed time.Duration
	// BackoffMin and BackoffMax bound the wait before an attempt after
	// one that got no answer, or an answer without Retry-After: doubling
	// from BackoffMin up to BackoffMax, with full jitter. Defaults 100ms
	// and 5s.
	BackoffMin, BackoffMax time.Duration
}

func (c Config) withDefaults() Config {
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	if c.MaxElapsed == 0 {
		c.MaxElapsed = 30 * time.Second
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 5 * time.Second
	}
	return c
}

func (c Config) validate() error {
	u, err := url.Parse(c.BaseURL)
	var errs []error
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("the base URL %q is not an http or https URL with a host: give intake's, e.g. http://127.0.0.1:8080", c.BaseURL))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("at most %d attempts: give 1 or more", c.MaxAttempts))
	}
	if c.MaxElapsed < 0 || c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin {
		errs = append(errs, fmt.Errorf("a call's bound %s, backoff %s to %s: give durations of 0 (the default) or more, the backoff's least no more than its most",
			c.MaxElapsed, c.BackoffMin, c.BackoffMax))
	}
	return errors.Join(errs...)
}

// Client calls one intake as one principal (Config.Token). It is safe for
// concurrent use.
type Client struct {
	cfg   Config
	doer  HttpRequestDoer
	token string
	// base is Config.BaseURL, the server of the generated request builders.
	base string
}

// New returns a Client with cfg's settings, or an error that says which
// setting is wrong.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{cfg: cfg, doer: cfg.HTTPClient, token: cfg.Token, base: cfg.BaseURL}, nil
}

// As is a Client of the same intake and settings that sends token, for a
// caller that speaks for many principals. It is cheap: nothing is
// connected anew.
func (c *Client) As(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// API is the generated client of every operation of the document, sending
// c's token through c's HTTP client, once per call: no retries, and the
// answers of every status decoded into their types.
func (c *Client) API() (*ClientWithResponses, error) {
	return NewClientWithResponses(c.base, WithHTTPClient(c.doer), WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		return nil
	}))
}

// NewEventID returns a fresh event id: 22 random characters of
// [A-Za-z0-9_-]. A vote's event_id is its idempotency key: keep it with
// the vote, and send the vote again with the same one.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Vote sends v to POST /v1/votes and returns intake's 202: accepted for
// processing, not counted yet (VoteStatus tells its outcome). A v without
// an EventId gets one from NewEventID, read it from the answer. Every
// attempt sends the same event_id, so the vote is counted at most once
// however many were sent.
func (c *Client) Vote(ctx context.Context, v Vote) (*Accepted, error) {
	if v.EventId == "" {
		v.EventId = NewEventID()
	}
	what := "vote " + v.EventId
	resp, err := c.do(ctx, what, func() (*http.Request, error) { return NewPostVoteRequest(c.base, v) }, http.StatusAccepted)
	if err != nil {
		return nil, err
	}
	r, err := ParsePostVoteResponse(resp)
	if err == nil && r.JSON202 == nil {
		err = fmt.Errorf("the %d answer is %q, not JSON", r.StatusCode(), resp.Header.Get("Content-Type"))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read the answer: %w", what, err)
	}
	return r.JSON202, nil
}

// VoteStatus reads GET /v1/votes/{event_id}: where the caller's own event
// stands (pending, recorded, duplicate, superseded, rejected and why).
func (c *Client) VoteStatus(ctx context.Context, eventID string) (*EventStatus, error) {
	what := "read the status of vote " + eventID
	resp, err := c.do(ctx, what, func() (*http.Request, error) { return NewGetVoteRequest(c.base, eventID) }, http.StatusOK)
	if err != nil {
		return nil, err
	}
	r, err := ParseGetVoteResponse(resp)
	if err == nil && r.JSON200 == nil {
		err = fmt.Errorf("the %d answer is %q, not JSON", r.StatusCode(), resp.Header.Get("Content-Type"))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read the answer: %w", what, err)
	}
	return r.JSON200, nil
}

// Results reads GET /v1/polls/{poll_id}/results: the poll's tallies from
// the projection.
func (c *Client) Results(ctx context.Context, pollID string) (*Results, error) {
	what := "read the results of poll " + pollID
	resp, err := c.do(ctx, what, func() (*http.Request, error) { return NewGetResultsRequest(c.base, pollID) }, http.StatusOK)
	if err != nil {
		return nil, err
	}
	r, err := ParseGetResultsResponse(resp)
	if err == nil && r.JSON200 == nil {
		err = fmt.Errorf("the %d answer is %q, not JSON", r.StatusCode(), resp.Header.Get("Content-Type"))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read the answer: %w", what, err)
	}
	return r.JSON200, nil
}

// CreatePoll sends p to POST /v1/polls (an admin's token) and returns the
// poll: made (201), or there already with the same definition (200), so
// sending it again is safe. Another definition under its id is a
// *Problem of type poll-exists.
func (c *Client) CreatePoll(ctx context.Context, p PollRequest) (*Poll, error) {
	what := "create poll " + p.PollId
	var body CreatePollJSONRequestBody
	if err := body.FromPollRequest(p); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	resp, err := c.do(ctx, what, func() (*http.Request, error) { return NewCreatePollRequest(c.base, body) },
		http.StatusCreated, http.StatusOK)
	if err != nil {
		return nil, err
	}
	r, err := ParseCreatePollResponse(resp)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: read the answer: %w", what, err)
	case r.JSON201 != nil:
		return r.JSON201, nil
	case r.JSON200 != nil:
		poll, err := r.JSON200.AsPoll()
		if err != nil {
			return nil, fmt.Errorf("%s: read the answer: %w", what, err)
		}
		return &poll, nil
	}
	return nil, fmt.Errorf("%s: intake answered %d with no poll", what, r.StatusCode())
}
