package client

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// The wait before attempt n+1 is random, above 0 and at most BackoffMin
// doubled n-1 times, capped at BackoffMax, and spread over that range.
func TestBackoffBounds(t *testing.T) {
	c, err := New(Config{BaseURL: "http://intake", BackoffMin: 10 * time.Millisecond, BackoffMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 70; attempt++ {
		ceiling := time.Second
		if attempt <= 7 {
			ceiling = 10 * time.Millisecond << (attempt - 1)
		}
		var top time.Duration
		for range 200 {
			d := c.backoff(attempt)
			if d <= 0 || d > ceiling {
				t.Fatalf("attempt %d: waits %s, want within (0, %s]", attempt, d, ceiling)
			}
			top = max(top, d)
		}
		if top <= ceiling/2 {
			t.Fatalf("attempt %d: 200 waits all at most %s, half the ceiling %s: no jitter over the range", attempt, top, ceiling)
		}
	}
}

// A call that gets no answer (nothing listens) is sent MaxAttempts times,
// then gives up with the connection's error.
func TestNoAnswerRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := New(Config{BaseURL: "http://" + addr, MaxAttempts: 3, BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Results(t.Context(), "lunch")
	var op *net.OpError
	if !errors.As(err, &op) || !strings.Contains(err.Error(), "gave up after 3 attempts") {
		t.Fatalf("results from a port nothing listens on: %v; want the connection's error after 3 attempts", err)
	}
	var p *Problem
	if errors.As(err, &p) {
		t.Fatalf("no answer came, yet the error carries a problem: %+v", p)
	}
}
