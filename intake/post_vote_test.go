package intake

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"tally/internal/apitest"
)

// TestAnswerEnqueue checks the answer to every outcome of enqueue: status,
// problem type, Retry-After, the detail's figures, and the counter the
// outcome moves.
func TestAnswerEnqueue(t *testing.T) {
	t.Parallel()
	api, err := apitest.Load(openAPIDocument)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Rate: 2, Burst: 7, BacklogRetryAfter: 3 * time.Second, BreakerOpenFor: 4 * time.Second, WaitReplicas: 2}.withDefaults()
	for _, tc := range []struct {
		res        enqueueResult
		status     int
		problem    string
		retryAfter string
		detail     string
		counter    func(*metrics) prometheus.Counter
	}{
		{res: enqueueResult{outcome: outAccepted}, status: 202},
		{res: enqueueResult{outcome: outReplay}, status: 202, counter: func(m *metrics) prometheus.Counter { return m.replays }},
		{res: enqueueResult{outcome: outConflict}, status: 409, problem: "key-reused", detail: `event id "e1" was already used`},
		{res: enqueueResult{outcome: outLimited, wait: 1500 * time.Millisecond}, status: 429, problem: "rate-limited",
			retryAfter: "2", detail: "2 votes per second with bursts of 7", counter: func(m *metrics) prometheus.Counter { return m.rateLimited }},
		{res: enqueueResult{outcome: outBacklog}, status: 503, problem: "backlog-full", retryAfter: "3", detail: "queue of votes",
			counter: func(m *metrics) prometheus.Counter { return m.backlogRefusals }},
		{res: enqueueResult{outcome: outUnconfirmed, replicas: 1}, status: 503, problem: "maybe-queued", retryAfter: "1", detail: "only 1 of 2 Redis replicas"},
		{res: enqueueResult{outcome: outBreakerOpen}, status: 503, problem: "not-queued", retryAfter: "4", detail: "not trying it for now"},
		{res: enqueueResult{outcome: outRedisError}, status: 503, problem: "maybe-queued", retryAfter: "1", detail: "may or may not be queued"},
	} {
		m, err := newMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{cfg: cfg, metrics: m, log: slog.New(slog.DiscardHandler)}
		w := httptest.NewRecorder()
		s.answerEnqueue(w, httptest.NewRequest(http.MethodPost, routeVotes, nil), &voteBody{eventID: "e1"}, tc.res, errors.New("down"))
		name := string(tc.res.outcome)
		if w.Code != tc.status {
			t.Errorf("%s: status %d, want %d", name, w.Code, tc.status)
		}
		if err := api.CheckAnswer(http.MethodPost, routeVotes, w.Code, w.Header(), w.Body.Bytes()); err != nil {
			t.Errorf("%s: OpenAPI contract: %v", name, err)
		}
		if got := w.Header().Get("Retry-After"); got != tc.retryAfter {
			t.Errorf("%s: Retry-After %q, want %q", name, got, tc.retryAfter)
		}
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: body %q: %v", name, w.Body, err)
		}
		if tc.status == http.StatusAccepted {
			if body["event_id"] != "e1" || body["status"] != "pending" || w.Header().Get("Location") != "/v1/votes/e1" {
				t.Errorf("%s: 202 body %s", name, w.Body)
			}
		} else if body["type"] != problemTypeBaseURI+tc.problem || !strings.Contains(body["detail"].(string), tc.detail) {
			t.Errorf("%s: problem %s, want type %q and a detail containing %q", name, w.Body, tc.problem, tc.detail)
		}
		for _, c := range []prometheus.Counter{m.replays, m.rateLimited, m.backlogRefusals} {
			want := 0.0
			if tc.counter != nil && tc.counter(m) == c {
				want = 1
			}
			if got := testutil.ToFloat64(c); got != want {
				t.Errorf("%s: counter %s is %v, want %v", name, c.Desc(), got, want)
			}
		}
	}
	for _, o := range outcomes {
		if _, ok := enqueueAnswers[o]; !ok {
			t.Errorf("outcome %s has no answer in enqueueAnswers", o)
		}
	}
}
