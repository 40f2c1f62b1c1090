package intake_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/intake"
	"tally/ledger"
	"tally/stream"
)

// This file tests the edges of a request: its framing, headers and path,
// over real connections to a served intake, some of them raw TCP where a
// Go client would not send what a careless or hostile one does.

// rawConn is a raw TCP connection to the bundle's intake.
type rawConn struct {
	net.Conn
	rd *bufio.Reader
	// The request line of each send not answered yet. Raw requests are
	// malformed on purpose, so no validator parses them; their answers are
	// checked against the OpenAPI document by this line alone.
	lines []string
}

func (b *bundle) dial(t *testing.T) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, rd: bufio.NewReader(c)}
}

// send writes raw bytes, the request as a client would put them on the wire.
func (c *rawConn) send(t *testing.T, raw string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(raw, "\r\n")
	c.lines = append(c.lines, line)
}

// answer reads one response, within 10s.
func (c *rawConn) answer(t *testing.T) reply {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(c.rd, nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if resp.Close { // ReadResponse moves "Connection: close" there
		r.header.Set("Connection", "close")
	}
	_ = json.Unmarshal(raw, &r.body)
	c.check(t, r)
	return r
}

// check checks the answer r to the oldest request line sent and not
// answered yet against the OpenAPI document.
func (c *rawConn) check(t *testing.T, r reply) {
	t.Helper()
	if len(c.lines) == 0 {
		t.Fatalf("an answer (%d) to no request", r.code)
	}
	method, target, _ := strings.Cut(c.lines[0], " ")
	target, _, _ = strings.Cut(target, " ")
	c.lines = c.lines[1:]
	api, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	if err := api.CheckAnswer(method, target, r.code, r.header, []byte(r.raw)); err != nil {
		t.Errorf("OpenAPI contract: %v", err)
	}
}

// closed checks the server closes the connection (after any answer read).
func (c *rawConn) closed(t *testing.T) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.rd.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the connection is still open: read %d bytes, %v; want EOF", n, err)
	}
}

// postHead is the head of a POST /v1/votes with the given extra header
// lines (each ending in CRLF).
func postHead(token, extra string) string {
	return "POST /v1/votes HTTP/1.1\r\nHost: intake\r\nAuthorization: Bearer " + token +
		"\r\nContent-Type: application/json\r\n" + extra + "\r\n"
}

// TestBodyStopsArriving sends a Content-Length of 100 and 10 bytes, then
// waits past the read timeout: the answer is 408 with a generic detail and
// the connection is closed, never a 400 that quotes socket addresses.
func TestBodyStopsArriving(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.ReadTimeout = 300 * time.Millisecond })
	c := b.dial(t)
	c.send(t, postHead(b.token, "Content-Length: 100\r\n")+`{"event_id"`[:10])
	r := c.answer(t)
	wantProblem(t, r, http.StatusRequestTimeout)
	if r.str("type") != "urn:tally:problem:request-timeout" {
		t.Errorf("type %q", r.str("type"))
	}
	for _, leak := range []string{"127.0.0.1", "tcp", "timeout"} {
		if strings.Contains(r.str("detail"), leak) {
			t.Errorf("detail %q names %q", r.str("detail"), leak)
		}
	}
	c.closed(t)
	if n := b.xlen(t); n != 0 {
		t.Fatalf("%d entries enqueued", n)
	}
}

// TestBodyCutShort closes the sending side after 10 of 100 bytes: 400
// saying the body ended early, without the connection's error.
func TestBodyCutShort(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.dial(t)
	c.send(t, postHead(b.token, "Content-Length: 100\r\n")+`{"event_id"`[:10])
	c.Conn.(*net.TCPConn).CloseWrite()
	r := c.answer(t)
	wantProblem(t, r, http.StatusBadRequest)
	if d := r.str("detail"); !strings.Contains(d, "the body ended before the length the request declared") {
		t.Errorf("detail %q", d)
	}
}

// TestRepresentation: a compressed body or a charset other than utf-8 gets
// 415 saying what intake takes; identity and utf-8, named or not, pass.
func TestRepresentation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, tc := range []struct {
		contentType, encoding string
		code                  int
		typ, detail           string
	}{
		{"application/json", "gzip", 415, "unsupported-content-encoding", `Content-Encoding "gzip", but intake takes the body uncompressed`},
		{"application/json", "identity, br", 415, "unsupported-content-encoding", `"identity, br"`},
		{"application/json; charset=iso-8859-1", "", 415, "unsupported-media-type", "intake takes UTF-8 only"},
		{"application/json;charset=UTF-16", "", 415, "unsupported-media-type", "with charset=utf-8 or no charset"},
		{"text/plain", "", 415, "unsupported-media-type", `Content-Type "text/plain"`},
		{"application/json; charset=UTF-8", "", 202, "", ""},
		{"application/json", "identity", 202, "", ""},
		{"application/json", "Identity", 202, "", ""},
	} {
		req, err := http.NewRequest(http.MethodPost, b.url+"/v1/votes", strings.NewReader(string(voteBody("rep"+string(rune('a'+i)), "p1", "a"))))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+b.token)
		req.Header.Set("Content-Type", tc.contentType)
		if tc.encoding != "" {
			req.Header.Set("Content-Encoding", tc.encoding)
		}
		r := b.send(t, req)
		if tc.code == 202 {
			if r.code != 202 {
				t.Errorf("%s, %s: status %d: %s", tc.contentType, tc.encoding, r.code, r.raw)
			}
			continue
		}
		wantProblem(t, r, tc.code)
		if r.str("type") != "urn:tally:problem:"+tc.typ || !strings.Contains(r.str("detail"), tc.detail) {
			t.Errorf("%s, %s: %s, want type %s and a detail with %q", tc.contentType, tc.encoding, r.raw, tc.typ, tc.detail)
		}
		if tc.typ == "unsupported-content-encoding" && r.header.Get("Accept-Encoding") != "identity" {
			t.Errorf("Accept-Encoding %q, want identity", r.header.Get("Accept-Encoding"))
		}
	}
	if n := b.xlen(t); n != 3 {
		t.Fatalf("%d entries enqueued, want 3", n)
	}
}

// chunked is body in the chunked transfer coding.
func chunked(body []byte) string {
	return strconv.FormatInt(int64(len(body)), 16) + "\r\n" + string(body) + "\r\n0\r\n\r\n"
}

// TestLengthAndChunked sends a request with both Content-Length and
// Transfer-Encoding, then a second request on the same connection: the
// first is answered and the connection closed (RFC 9112 6.1), so the
// second, which a proxy that trusted Content-Length would read otherwise,
// is never served.
func TestLengthAndChunked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.dial(t)
	c.send(t, postHead(b.token, "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n")+chunked(voteBody("te1", "p1", "a"))+
		postHead(b.token, "Content-Length: 52\r\n")+string(voteBody("te2", "p1", "b")))
	r := c.answer(t)
	if r.header.Get("Connection") != "close" {
		t.Errorf("Connection %q, want close", r.header.Get("Connection"))
	}
	if r.code != http.StatusAccepted || r.str("event_id") != "te1" {
		t.Errorf("status %d: %s; want 202 for te1, read by its chunked coding", r.code, r.raw)
	}
	c.closed(t)
	time.Sleep(100 * time.Millisecond)
	if n := b.xlen(t); n != 1 {
		t.Fatalf("%d entries enqueued, want 1 (te1): the request sent after it was served too", n)
	}
}

// TestAuthorizationHeaders: two Authorization headers get 400 saying to
// send one; a 401 carries the RFC 6750 challenge that says whether a token
// was sent and refused.
func TestAuthorizationHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name      string
		auth      []string
		code      int
		typ       string
		challenge string
	}{
		{"two headers", []string{"Bearer " + b.token, "Bearer " + b.token}, 400, "multiple-authorization", `Bearer error="invalid_request"`},
		{"none", nil, 401, "unauthorized", "Bearer"},
		{"empty", []string{""}, 401, "unauthorized", "Bearer"},
		{"other scheme", []string{"Basic dm90ZXI6eA=="}, 401, "unauthorized", "Bearer"},
		{"no token", []string{"Bearer "}, 401, "unauthorized", `Bearer error="invalid_request"`},
		{"unknown token", []string{"Bearer nope"}, 401, "unauthorized", `Bearer error="invalid_token"`},
	} {
		for _, path := range []string{"/v1/votes", "/v1/polls/p1/results"} {
			method := http.MethodPost
			if path != "/v1/votes" {
				method = http.MethodGet
			}
			req, err := http.NewRequest(method, b.url+path, strings.NewReader(string(voteBody("auth1", "p1", "a"))))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			for _, a := range tc.auth {
				req.Header.Add("Authorization", a)
			}
			r := b.send(t, req)
			wantProblem(t, r, tc.code)
			if r.str("type") != "urn:tally:problem:"+tc.typ {
				t.Errorf("%s %s: type %q, want %s", tc.name, path, r.str("type"), tc.typ)
			}
			if got := r.header.Values("WWW-Authenticate"); len(got) != 1 || got[0] != tc.challenge {
				t.Errorf("%s %s: WWW-Authenticate %q, want %q", tc.name, path, got, tc.challenge)
			}
			if tc.code == 400 && !strings.Contains(r.str("detail"), "2 Authorization headers: send exactly one") {
				t.Errorf("%s: detail %q", tc.name, r.str("detail"))
			}
		}
	}
	if n := b.xlen(t); n != 0 {
		t.Fatalf("%d entries enqueued", n)
	}
}

// TestNonCanonicalPaths: a path not spelled as a route gets a problem+json
// 404, never the mux's HTML redirect to the cleaned path; the routes as
// spelled still answer.
func TestNonCanonicalPaths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, line := range []string{
		"POST //v1/votes", "POST /v1/votes/", "POST /v1/../v1/votes", "POST /v1/./votes", "POST /v1/%2e%2e/v1/votes",
		"GET /v1//polls/p1/results", "GET /v1/polls/p1/results/", "GET //healthz", "GET /healthz/", "GET /readyz/.",
		"CONNECT intake:443",
	} {
		c := b.dial(t)
		c.send(t, line+" HTTP/1.1\r\nHost: intake\r\nAuthorization: Bearer "+b.token+
			"\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n")
		r := c.answer(t)
		if r.code != http.StatusNotFound || r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("Location") != "" {
			t.Errorf("%s: %d %s, Location %q: %s", line, r.code, r.header.Get("Content-Type"), r.header.Get("Location"), r.raw)
			continue
		}
		if r.str("type") != "urn:tally:problem:not-found" || !strings.Contains(r.str("detail"), "is not spelled as a route") {
			t.Errorf("%s: %s", line, r.raw)
		}
	}
	for path, code := range map[string]int{"/healthz": 200, "/v1/polls/p1/results": 200, "/v1/votes/nope": 404} {
		if r := b.do(t, http.MethodGet, path, b.token, "", nil); r.code != code {
			t.Errorf("GET %s: %d, want %d: %s", path, r.code, code, r.raw)
		}
	}
}

// TestMaxConns holds Config.MaxConns keep-alive connections open: a
// further client's request waits unanswered until one of them closes, by
// the client or by IdleTimeout.
func TestMaxConns(t *testing.T) {
	t.Parallel()
	if def := intake.DefaultConfig(); def.MaxConns != 10_000 || def.IdleTimeout != 30*time.Second {
		t.Fatalf("defaults MaxConns %d, IdleTimeout %s", def.MaxConns, def.IdleTimeout)
	}
	keys, _ := stream.NewKeys("x", 1)
	store, _ := ledger.New(nil, ledger.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	if _, err := intake.New(intake.Config{MaxConns: -1}, store, rdb, keys, nil, nil); err == nil || !strings.Contains(err.Error(), "the connection bound must be at least 1, got -1") {
		t.Fatalf("MaxConns -1: %v, want an error that names it", err)
	}
	for _, idle := range []time.Duration{time.Minute, 300 * time.Millisecond} {
		b := setup(t, func(c *config) { c.MaxConns = 2; c.IdleTimeout = idle })
		const get = "GET /healthz HTTP/1.1\r\nHost: intake\r\n\r\n"
		held := []*rawConn{b.dial(t), b.dial(t)}
		for _, c := range held {
			c.send(t, get)
			if r := c.answer(t); r.code != http.StatusOK {
				t.Fatalf("status %d: %s", r.code, r.raw)
			}
		}
		extra := b.dial(t) // the kernel completes the handshake; intake does not accept it yet
		extra.send(t, get)
		start := time.Now()
		if idle == time.Minute {
			extra.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if n, err := extra.rd.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a third connection was served with MaxConns 2: read %d bytes, %v", n, err)
			}
			held[0].Close()
		}
		if r := extra.answer(t); r.code != http.StatusOK {
			t.Fatalf("status %d: %s", r.code, r.raw)
		}
		if idle != time.Minute && time.Since(start) < idle/2 {
			t.Fatalf("served after %s, before the held connections were idle for %s", time.Since(start), idle)
		}
	}
}

// TestBodyWithBOM: a body that starts with a UTF-8 byte order mark gets a
// 400 that names it, rather than an invalid character.
func TestBodyWithBOM(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, http.MethodPost, "/v1/votes", b.token, "application/json", append([]byte("\xef\xbb\xbf"), voteBody("bom1", "p1", "a")...))
	wantProblem(t, r, http.StatusBadRequest)
	if want := "the body starts with a byte order mark (BOM): send UTF-8 JSON without it"; r.str("detail") != want {
		t.Fatalf("detail %q, want %q", r.str("detail"), want)
	}
}
