package loadtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"tally/credential"
	"tally/ledger"
)

// A vote's backoff doubles from BackoffMin up to BackoffMax with full
// jitter, and gives way to the answer's Retry-After, capped.
func TestVoteBackoff(t *testing.T) {
	t.Parallel()
	s := &Session{cfg: Config{BackoffMin: 10 * time.Millisecond, BackoffMax: 40 * time.Millisecond, MaxRetryAfter: time.Second}}
	var last answer
	b := s.voteBackoff(&last)
	for n, bound := range []time.Duration{10, 20, 40, 40, 40} {
		bound *= time.Millisecond
		d, stop := b.Next()
		if stop || d < 0 || d >= bound {
			t.Fatalf("wait %d: %s (stop %v), want in [0, %s)", n+1, d, stop, bound)
		}
	}
	for _, c := range []struct{ retryAfter, want time.Duration }{
		{200 * time.Millisecond, 200 * time.Millisecond},
		{5 * time.Second, time.Second},
	} {
		last.retryAfter = c.retryAfter
		if d, _ := b.Next(); d != c.want {
			t.Errorf("Retry-After %s: wait %s, want %s", c.retryAfter, d, c.want)
		}
	}
}

// oneVote returns a session with one principal whose votes go to h, and the
// first vote it plans.
func oneVote(t *testing.T, h http.HandlerFunc, maxAttempts int) (*Session, task) {
	t.Helper()
	srv := httptest.NewServer(h)
	s, err := New(Config{
		Targets: []string{srv.URL}, Votes: 1, MaxAttempts: maxAttempts,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
	}, Deps{Store: &ledger.Store{}, Key: &credential.Key{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.client.CloseIdleConnections()
		srv.Close()
	})
	s.principals = []principal{{id: "p0", token: "t0"}}
	tk, ok := s.truth.next(MaxPolls)
	if !ok {
		t.Fatal("no vote planned")
	}
	return s, tk
}

// A 503 sends the vote again after the backoff, until it is answered 202.
func TestSendRetriesUntilFinal(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	s, tk := oneVote(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(`{"event_id":"k0","status":"pending","status_url":"/v1/votes/k0"}`))
	}, 20)
	s.send(context.Background(), tk, 0)
	if keyID(tk.key) != "k0" {
		t.Fatalf("the first vote's key is %s, want k0", keyID(tk.key))
	}
	if got := s.requests.Load(); got != 3 {
		t.Errorf("requests: %d, want 3", got)
	}
	if s.acceptedN.Load() != 1 || s.truth.retried["503"] != 2 {
		t.Errorf("accepted %d, retried %v; want 1 and 503: 2", s.acceptedN.Load(), s.truth.retried)
	}
	if as := s.truth.anomalies.messages(); len(as) != 0 {
		t.Errorf("anomalies: %v", as)
	}
}

// MaxAttempts bounds the requests of a vote that is never answered for good.
func TestSendStopsAtMaxAttempts(t *testing.T) {
	t.Parallel()
	s, tk := oneVote(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}, 4)
	s.send(context.Background(), tk, 0)
	if got := s.requests.Load(); got != 4 {
		t.Errorf("requests: %d, want 4", got)
	}
	if s.truth.refused["503"] != 1 {
		t.Errorf("refused: %v, want 503: 1", s.truth.refused)
	}
}

// The wait before a vote is sent again ends with its context.
func TestSendHonoursContext(t *testing.T) {
	t.Parallel()
	s, tk := oneVote(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "10")
		w.WriteHeader(http.StatusTooManyRequests)
	}, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	s.send(ctx, tk, 0)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("send took %s after its context ended at 200ms", took)
	}
	if got := s.requests.Load(); got != 1 {
		t.Errorf("requests: %d, want 1", got)
	}
	if s.sent.Load() != 1 {
		t.Errorf("sent: %d, want 1 (the vote is recorded with its last answer)", s.sent.Load())
	}
}
