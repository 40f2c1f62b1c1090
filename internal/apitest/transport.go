package apitest

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
)

// Transport returns a RoundTripper that sends each request through base
// (http.DefaultTransport when nil) and checks the exchange with Check,
// reporting a mismatch with t.Errorf: the test goes on, and fails. It
// reads each answer's body whole before returning it, so it is not for
// streams. A request body is checked when it was sent whole; one the
// server answered before it was all sent (a 413, a body that never
// arrives) leaves the answer checked alone, as CheckAnswer does.
func (c *Contract) Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &checked{c: c, t: t, base: base}
}

// SampledTransport is Transport for a load of thousands of exchanges of a
// few kinds: of the exchanges of one route, method and status it checks
// the first `first`, then one in `every`. A check costs milliseconds
// (kin-openapi compiles every schema it validates with, at each
// validation), which would make a load test several times slower while
// telling no more than the first few exchanges of each kind do.
func (c *Contract) SampledTransport(t testing.TB, base http.RoundTripper, first, every int) http.RoundTripper {
	ct := c.Transport(t, base).(*checked)
	ct.first, ct.every, ct.seen = first, max(every, 1), map[string]int{}
	return ct
}

type checked struct {
	c    *Contract
	t    testing.TB
	base http.RoundTripper

	// Sampling, with SampledTransport: how many exchanges of each kind
	// were seen.
	first, every int
	mu           sync.Mutex
	seen         map[string]int
}

// sampled reports whether the exchange of req answered with status is one
// to check.
func (ct *checked) sampled(req *http.Request, status int) bool {
	if ct.seen == nil {
		return true
	}
	kind := req.Method + " " + req.URL.Path + " " + strconv.Itoa(status)
	if in, err := ct.c.input(req); err == nil {
		kind = req.Method + " " + in.Route.Path + " " + strconv.Itoa(status)
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	n := ct.seen[kind]
	ct.seen[kind] = n + 1
	return n < ct.first || (n-ct.first)%ct.every == ct.every-1
}

func (ct *checked) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := req
	var tee *teeBody
	if req.Body != nil && req.Body != http.NoBody {
		tee = &teeBody{rc: req.Body}
		sent = req.Clone(req.Context())
		sent.Body = tee
	}
	resp, err := ct.base.RoundTrip(sent)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if !ct.sampled(req, resp.StatusCode) {
		return resp, nil
	}

	reqBody, whole := []byte(nil), true
	if tee != nil {
		reqBody, whole = tee.read()
	}
	if whole {
		err = ct.c.Check(req, reqBody, resp.StatusCode, resp.Header, body)
	} else {
		err = ct.c.CheckAnswer(req.Method, req.URL.RequestURI(), resp.StatusCode, resp.Header, body)
	}
	if err != nil {
		ct.t.Errorf("OpenAPI contract: %v", err)
	}
	return resp, nil
}

// teeBody keeps what the transport read of a request body. The transport
// may still be writing it (from a goroutine of its own) when the answer
// has come.
type teeBody struct {
	rc   io.ReadCloser
	mu   sync.Mutex
	buf  bytes.Buffer
	done bool // read to its end
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	b.buf.Write(p[:n])
	if err == io.EOF {
		b.done = true
	}
	b.mu.Unlock()
	return n, err
}

func (b *teeBody) Close() error { return b.rc.Close() }

// read returns a copy of what was read, and whether that was all of it.
func (b *teeBody) read() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes()), b.done
}
