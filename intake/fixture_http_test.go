package intake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"tally/intake"
	"tally/internal/apitest"
)

// This file holds the fixture's requests and answers: each exchange is
// checked against intake's OpenAPI document, and the helpers read answers,
// the stream and metrics.

// reply is an HTTP answer with its body decoded.
type reply struct {
	code   int
	header http.Header
	body   map[string]any
	raw    string
	proto  int  // the HTTP major version it came in
	tls    bool // it came over TLS
}

func (r reply) str(key string) string { s, _ := r.body[key].(string); return s }

func (b *bundle) do(t *testing.T, method, path, token, contentType string, body []byte) reply {
	t.Helper()
	return b.send(t, b.request(t, method, path, token, contentType, body))
}

// request is the request of do, to send with another client.
func (b *bundle) request(t testing.TB, method, path, token, contentType string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}

// contract is intake's OpenAPI document, loaded once for every test.
var contract = sync.OnceValues(func() (*apitest.Contract, error) {
	return apitest.Load(intake.OpenAPIDocument())
})

// checked is client with every exchange checked against intake's OpenAPI
// document: a request the document refuses that intake accepts, or an
// answer the document does not give its route, fails t.
func checked(t testing.TB, client *http.Client) *http.Client {
	t.Helper()
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	checked := *client
	checked.Transport = c.Transport(t, client.Transport)
	return &checked
}

// sampled is checked for a load of thousands of exchanges: of each kind
// (route, method, status) it checks the first 20, then one in 100, since
// a check costs milliseconds.
func sampled(t testing.TB, client *http.Client) *http.Client {
	t.Helper()
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	sampled := *client
	sampled.Transport = c.SampledTransport(t, client.Transport, 20, 100)
	return &sampled
}

// send sends req with the bundle's client, checked against the OpenAPI
// document, and reads the whole answer.
func (b *bundle) send(t *testing.T, req *http.Request) reply {
	t.Helper()
	return sendWith(t, checked(t, b.client), req)
}

// sendWith is send with client (checked or sampled).
func sendWith(t *testing.T, client *http.Client, req *http.Request) reply {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{code: resp.StatusCode, header: resp.Header, raw: string(raw), proto: resp.ProtoMajor, tls: resp.TLS != nil}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func voteBody(eventID, poll, cand string) []byte {
	return []byte(fmt.Sprintf(`{"event_id":%q,"poll_id":%q,"candidate_id":%q}`, eventID, poll, cand))
}

func (b *bundle) vote(t *testing.T, token, eventID, poll, cand string) reply {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/votes", token, "application/json", voteBody(eventID, poll, cand))
}

func (b *bundle) xlen(t *testing.T) int64 {
	t.Helper()
	n, err := b.rdb.XLen(context.Background(), b.keys.Stream(0)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wantProblem checks r is a problem+json answer with status code.
func wantProblem(t *testing.T, r reply, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("status %d, want %d: %s", r.code, code, r.raw)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	if r.str("type") == "" || r.str("title") == "" || r.str("detail") == "" || r.body["status"] != float64(code) {
		t.Fatalf("incomplete problem document: %s", r.raw)
	}
}

// wantProblemType is wantProblem with the problem's type, by its slug
// (the part after "urn:tally:problem:").
func wantProblemType(t *testing.T, r reply, code int, slug string) {
	t.Helper()
	wantProblem(t, r, code)
	if got := r.str("type"); got != "urn:tally:problem:"+slug {
		t.Fatalf("problem type %q, want urn:tally:problem:%s: %s", got, slug, r.raw)
	}
}

// count is the value of a counter, to compare with what the test sent.
func count(c prometheus.Collector) int { return int(testutil.ToFloat64(c)) }

// observations is the number of samples of one child of a histogram.
func observations(t *testing.T, vec *prometheus.HistogramVec, label string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := vec.WithLabelValues(label).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
