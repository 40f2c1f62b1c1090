package intake_test

import (
	"bufio"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"tally/internal/testenv"
)

// This file tests what a TLS client can do to intake beyond a request:
// hold a live stream open over HTTP/2, send garbage in place of a
// handshake or of the HTTP/2 preface, and offer only CBC suites.

// serveTLSWith is serveTLS with a logger of the test's own and more
// options.
func serveTLSWith(t *testing.T, cert testCert, log *slog.Logger, opts ...option) *bundle {
	t.Helper()
	opts = append(opts, withLogger(log), func(c *config) { c.TLSCertFile, c.TLSKeyFile = cert.certFile, cert.keyFile })
	b := setup(t, opts...)
	tr := &http.Transport{TLSClientConfig: clientTLS(cert), ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	b.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	b.url = "https://" + strings.TrimPrefix(b.url, "http://")
	return b
}

// TestLiveStreamOverHTTP2StaysOpen: a live stream over TLS and HTTP/2
// with no event to send stays open across several heartbeats, though
// each heartbeat interval is longer than the server's write timeout
// (which, as the deadline of each write, reset such a stream about one
// write timeout after its last event). The stream's intervals are scaled
// down from the defaults (15s heartbeat, 10s write timeout) to keep the
// test short; their order is the defaults'.
func TestLiveStreamOverHTTP2StaysOpen(t *testing.T) {
	t.Parallel()
	cert := writeTestCert(t, t.TempDir(), "intake-1", 1)
	b := serveTLSWith(t, cert, testLogger(), func(c *config) {
		c.LiveHeartbeat, c.WriteTimeout, c.RequestTimeout = time.Second, 600*time.Millisecond, 500*time.Millisecond
	})
	publicPoll(t, b)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.url+"/v1/polls/pub/live", nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: b.client.Transport} // no timeout: the stream outlives one
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("stream answered %d over HTTP/%d, want 200 over HTTP/2", resp.StatusCode, resp.ProtoMajor)
	}
	lines := make(chan string)
	readErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
		readErr <- sc.Err()
	}()
	const want = 4
	heartbeats := 0
	deadline := time.After(4*time.Second + 3*time.Second)
	for heartbeats < want {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the stream ended after %d heartbeats: %v", heartbeats, <-readErr)
			}
			if strings.HasPrefix(l, ": heartbeat") {
				heartbeats++
			}
		case <-deadline:
			t.Fatalf("%d heartbeats in 7s, want %d, one a second", heartbeats, want)
		}
	}
}

// TestConnectionErrorsLogNoAddress: garbage in place of a TLS handshake
// and in place of the HTTP/2 preface is counted by kind; the log holds
// the first of each kind, not a line each, and no client address.
func TestConnectionErrorsLogNoAddress(t *testing.T) {
	t.Parallel()
	cert := writeTestCert(t, t.TempDir(), "intake-1", 1)
	var logs testenv.LogBuffer
	b := serveTLSWith(t, cert, slog.New(slog.NewTextHandler(&logs, nil)))
	addr := strings.TrimPrefix(b.url, "https://")
	const n = 30
	var clients []string // the client's addresses, none of which may be logged
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c.LocalAddr().String())
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) // not a ClientHello
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		c.Read(make([]byte, 64))
		c.Close()
	}
	for range n {
		cfg := clientTLS(cert)
		cfg.NextProtos = []string{"h2"}
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c.LocalAddr().String())
		c.Write([]byte("this is not the HTTP/2 preface\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		c.Read(make([]byte, 64))
		c.Close()
	}
	for kind, want := range map[string]float64{"tls_handshake": n, "http2": n} {
		testenv.Eventually(t, 5*time.Second, "the "+kind+" errors counted", func() bool {
			return testutil.ToFloat64(b.m.ConnectionErrors.WithLabelValues(kind)) >= want
		})
	}
	out := logs.String()
	for _, a := range clients {
		if _, port, _ := net.SplitHostPort(a); strings.Contains(out, ":"+port) {
			t.Fatalf("the log holds the client address %s:\n%s", a, out)
		}
	}
	for _, kind := range []string{"kind=tls_handshake", "kind=http2"} {
		if c := strings.Count(out, kind); c != 1 {
			t.Errorf("the log has %d lines of %s for %d errors, want 1 (the rest summed up later):\n%s", c, kind, n, out)
		}
	}
}

// TestTLS12OffersNoCBC: a TLS 1.2 client that offers only CBC suites gets
// no connection, and one that offers Go's defaults negotiates an AEAD
// suite.
func TestTLS12OffersNoCBC(t *testing.T) {
	t.Parallel()
	cert := writeTestCert(t, t.TempDir(), "intake-1", 1)
	b := serveTLSWith(t, cert, testLogger())
	addr := strings.TrimPrefix(b.url, "https://")
	var cbc []uint16
	for _, s := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		if strings.Contains(s.Name, "_CBC_") {
			cbc = append(cbc, s.ID)
		}
	}
	cfg := clientTLS(cert)
	cfg.MaxVersion, cfg.CipherSuites = tls.VersionTLS12, cbc
	if c, err := tls.Dial("tcp", addr, cfg); err == nil {
		suite := tls.CipherSuiteName(c.ConnectionState().CipherSuite)
		c.Close()
		t.Fatalf("a TLS 1.2 client offering only CBC suites negotiated %s", suite)
	}
	cfg = clientTLS(cert)
	cfg.MaxVersion = tls.VersionTLS12
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("a TLS 1.2 client with Go's default suites: %v", err)
	}
	defer c.Close()
	if suite := tls.CipherSuiteName(c.ConnectionState().CipherSuite); !strings.Contains(suite, "GCM") && !strings.Contains(suite, "CHACHA20") {
		t.Errorf("TLS 1.2 negotiated %s, want an AEAD suite", suite)
	}
}
