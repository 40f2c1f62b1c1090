package apitest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"tally/intake"
	"tally/internal/apitest"
)

// recorder is a testing.TB that keeps what Errorf reports instead of
// failing the test, so a test can assert that a mismatch is reported.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) reported() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs
}

// TestTransportReports serves answers on loopback that drifted from
// intake's document and some that did not: the transport reports each
// drifted one, naming the route, and still returns every answer whole.
func TestTransportReports(t *testing.T) {
	c, err := apitest.Load(intake.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		switch r.URL.Path {
		case "/healthz":
			io.WriteString(w, `{"status":"ok"}`)
		case "/readyz": // a field the document does not have
			io.WriteString(w, `{"status":"ready","checks":{"postgres":"ok","redis":"ok","backlog":"ok"},"uptime":3}`)
		case "/v1/votes": // accepts any vote, with a token or not
			w.Header().Set("Location", "/v1/votes/e1")
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"event_id":"e1","status":"pending","status_url":"/v1/votes/e1"}`)
		default:
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer srv.Close()

	for _, tc := range []struct {
		method, path, body string
		report             string // "" for none
	}{
		{"GET", "/healthz", "", ""},
		{"GET", "/readyz", "", "uptime"},
		{"GET", "/nope", "", "GET /nope (no route in the document)"},
		{"POST", "/v1/votes", `{"event_id":"e1","poll_id":"p1","candidate_id":"a"}`, "refuses the request"}, // no token
	} {
		rec := &recorder{TB: t}
		client := &http.Client{Transport: c.Transport(rec, nil)}
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(body) == 0 && resp.StatusCode != http.StatusTeapot {
			t.Errorf("%s %s: the answer's body was not returned whole: %q, %v", tc.method, tc.path, body, err)
		}
		got := rec.reported()
		switch {
		case tc.report == "" && len(got) != 0:
			t.Errorf("%s %s: reported %q, want nothing", tc.method, tc.path, got)
		case tc.report != "" && (len(got) != 1 || !strings.Contains(got[0], tc.report)):
			t.Errorf("%s %s: reported %q, want one report naming %q", tc.method, tc.path, got, tc.report)
		}
	}
}

// TestLoadRefuses: a document that is not OpenAPI 3.1, or lacks the
// answers to requests no operation takes, is refused with a reason.
func TestLoadRefuses(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`{"openapi":"3.0.3","info":{"title":"t","version":"1"},"paths":{}}`, "want 3.1"},
		{`{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{}}`, "RouteNotFound and MethodNotAllowed"},
		{`{"openapi":"3.1.0","info":{"title":"t"},"paths":{}}`, "invalid"},
	} {
		if _, err := apitest.Load([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.doc, err, tc.want)
		}
	}
}

// TestSampledTransport: of eight drifted answers of one kind, a sampled
// transport checks the first two, then one in three: four reports.
func TestSampledTransport(t *testing.T) {
	c, err := apitest.Load(intake.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		io.WriteString(w, `{"status":"fine"}`)
	}))
	defer srv.Close()
	rec := &recorder{TB: t}
	client := &http.Client{Transport: c.SampledTransport(rec, nil, 2, 3)}
	for range 8 {
		resp, err := client.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := rec.reported(); len(got) != 4 {
		t.Fatalf("%d reports, want 4 (exchanges 1, 2, 5 and 8): %q", len(got), got)
	}
}
