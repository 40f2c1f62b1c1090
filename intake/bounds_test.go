package intake_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"tally/internal/testenv"
)

// This file tests the bounds on what one client holds open: connections
// per address, the admin listener beside a saturated one, and live
// streams per address and per principal. The loopback /8 gives the tests
// a second client address: 127.0.0.2 plays the client that holds too
// much, 127.0.0.1 everyone else.

const otherAddr = "127.0.0.2"

// dialerFrom dials from ip.
func dialerFrom(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
}

// clientFrom is an HTTP client whose connections leave from ip, a
// loopback address other than 127.0.0.1 being another client address to
// intake.
func clientFrom(t testing.TB, ip string) *http.Client {
	tr := &http.Transport{DialContext: dialerFrom(ip).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// holdConns opens n connections from ip to the server of url and sends
// nothing on them; it returns those the server kept open and the answers
// of those it refused (read within a second: a kept one says nothing).
func holdConns(t *testing.T, url, ip string, n int) (held []net.Conn, refused []string) {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := dialerFrom(ip).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(time.Second))
			got[i], errs[i] = io.ReadAll(c)
		})
	}
	wg.Wait()
	for i, c := range conns {
		var ne net.Error
		if errors.As(errs[i], &ne) && ne.Timeout() && len(got[i]) == 0 {
			c.SetReadDeadline(time.Time{})
			held = append(held, c)
			continue
		}
		refused = append(refused, string(got[i]))
	}
	return held, refused
}

// TestConnsPerAddr: a client that tries to hold every connection of
// MaxConns gets MaxConnsPerAddr of them; the rest are answered 503
// too-many-connections and closed. Meanwhile another client votes and
// reads /readyz at once, and once the first client lets go of its
// connections it may open new ones. Without the bound, its connections
// would take every slot and the vote would wait in the accept queue.
func TestConnsPerAddr(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) {
		c.MaxConns, c.MaxLiveViewers, c.MaxConnsPerAddr = 20, 10, 8
		c.ReadHeaderTimeout, c.IdleTimeout = time.Minute, time.Minute // connections that hold on
	})
	held, refused := holdConns(t, b.url, otherAddr, 20)
	if len(held) != 8 || len(refused) != 12 {
		t.Fatalf("%d connections held and %d refused from one address, want 8 and 12", len(held), len(refused))
	}
	for _, raw := range refused {
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("a refused connection's answer %q: %v", raw, err)
		}
		body, _ := io.ReadAll(resp.Body)
		r := reply{code: resp.StatusCode, header: resp.Header, raw: string(body)}
		_ = json.Unmarshal(body, &r.body)
		wantProblemType(t, r, http.StatusServiceUnavailable, "too-many-connections")
		if resp.Header.Get("Retry-After") == "" || !resp.Close {
			t.Errorf("a refused connection's answer has Retry-After %q and Connection %q, want a delay and close",
				resp.Header.Get("Retry-After"), resp.Header.Get("Connection"))
		}
	}
	if got := testutil.ToFloat64(b.m.BoundRefusals.WithLabelValues("conns_per_addr")); got != 12 {
		t.Errorf("bound_refusals_total{bound=conns_per_addr} = %v, want 12", got)
	}

	start := time.Now()
	if r := b.vote(t, b.token, "e1", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote from another address: %d %s", r.code, r.raw)
	}
	if r := b.do(t, http.MethodGet, "/readyz", "", "", nil); r.code != http.StatusOK {
		t.Fatalf("/readyz from another address: %d %s", r.code, r.raw)
	}
	// Without the bound they would wait for a held connection to end, a
	// minute (ReadHeaderTimeout); a loaded machine takes seconds (4 and 8
	// seen), so the bound is well under the minute, not the 1 s of a quiet one.
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("a vote and /readyz from another address took %s while one address held its most connections, want well under the minute a held connection lasts", d)
	}

	for _, c := range held {
		c.Close()
	}
	testenv.Eventually(t, 5*time.Second, "the address to open connections again once it closed its own", func() bool {
		resp, err := clientFrom(t, otherAddr).Get(b.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestAdminListener: with an admin listener, /readyz and /metrics are
// answered there while the data listener's every connection is held, and
// the data listener serves no /metrics.
func TestAdminListener(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) {
		c.AdminListen = "127.0.0.1:0" // the fixture listens on a port of its own
		c.MaxConns, c.MaxLiveViewers, c.MaxConnsPerAddr = 10, 5, -1
		c.ReadHeaderTimeout, c.IdleTimeout = time.Minute, time.Minute
	})
	r := b.do(t, http.MethodGet, "/metrics", "", "", nil)
	wantProblemType(t, r, http.StatusNotFound, "not-found")
	if !strings.Contains(r.str("detail"), "on its admin listener") {
		t.Errorf("the data listener's 404 of /metrics does not say where /metrics is: %s", r.raw)
	}
	b.client.Transport.(*http.Transport).CloseIdleConnections()
	if held, _ := holdConns(t, b.url, otherAddr, 10); len(held) != 10 {
		t.Fatalf("%d connections held, want all 10 of MaxConns", len(held))
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	for _, path := range []string{"/readyz", "/healthz", "/metrics"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.adminURL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s on the admin listener while the data listener is full: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s on the admin listener: %d %s", path, resp.StatusCode, body)
		}
		if path == "/metrics" && !strings.Contains(string(body), "tally_intake_requests_total") {
			t.Errorf("/metrics on the admin listener lacks intake's metrics")
		}
	}
	resp, err := http.Get(b.adminURL + "/v1/votes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the admin listener answered /v1/votes %d, want 404", resp.StatusCode)
	}
}

// TestLivePerAddrAndPrincipal: one address opens live streams up to its
// bound and is refused the next with 429 live-address-limit; a viewer at
// another address, and a principal's viewer, still get a stream; the
// principal's own bound refuses its next stream from a third address
// with 429 live-principal-limit; a stream closed gives its place back.
func TestLivePerAddrAndPrincipal(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.MaxLivePerAddr, c.MaxLivePerPrincipal = 2, 1 })
	publicPoll(t, b)
	first := openLiveFrom(t, b, "pub", "", otherAddr)
	openLiveFrom(t, b, "pub", "", otherAddr)
	wantLiveRefused(t, getLiveFrom(t, b, "pub", "", otherAddr), http.StatusTooManyRequests, "live-address-limit")

	openLive(t, b, "pub", "")
	openLive(t, b, "pub", b.token)
	wantLiveRefused(t, getLiveFrom(t, b, "pub", b.token, "127.0.0.3"), http.StatusTooManyRequests, "live-principal-limit")
	for bound, want := range map[string]float64{"live_per_addr": 1, "live_per_principal": 1} {
		if got := testutil.ToFloat64(b.m.BoundRefusals.WithLabelValues(bound)); got != want {
			t.Errorf("bound_refusals_total{bound=%s} = %v, want %v", bound, got, want)
		}
	}
	if got := testutil.ToFloat64(b.m.Requests.WithLabelValues("/v1/polls/{poll_id}/live", "429")); got != 2 {
		t.Errorf("requests_total{route=/v1/polls/{poll_id}/live,code=429} = %v, want 2 (the live route counted under its own label)", got)
	}

	first.resp.Body.Close()
	testenv.Receive(t, first.done, 10*time.Second, "the first stream to end once its body was closed")
	testenv.Eventually(t, 5*time.Second, "the address's place freed for another stream", func() bool {
		resp := getLiveFrom(t, b, "pub", "", otherAddr)
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// wantLiveRefused checks that a stream was refused with code and the
// problem type slug, and Retry-After.
func wantLiveRefused(t *testing.T, resp *http.Response, code int, slug string) {
	t.Helper()
	if resp.StatusCode == http.StatusOK {
		resp.Body.Close() // its body would not end: read none of it
		t.Fatalf("a stream beyond its bound was opened (200), want %d %s", code, slug)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	checkLiveAnswer(t, resp, raw)
	r := reply{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	wantProblemType(t, r, code, slug)
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("%s answered without Retry-After", slug)
	}
}

// keepAlive opens n connections from ip to the server of url, each of
// which asks for /healthz once and keeps its connection open (idle, as a
// keep-alive client leaves it); it returns the connections answered 200
// and the number answered otherwise (refused).
func keepAlive(t *testing.T, url, ip string, n int) (kept []net.Conn, refused int) {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	for range n {
		c, err := dialerFrom(ip).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: intake\r\n\r\n"); err != nil {
			refused++
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
			refused++
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.SetDeadline(time.Time{})
		kept = append(kept, c)
	}
	return kept, refused
}

// TestAdminListenerBounded: one address's 64 idle keep-alive connections
// to the admin listener get 8 of its slots, /readyz from another address
// is answered at once, and the idle connections are closed within the
// admin listener's short idle time, whatever Config.IdleTimeout says;
// without the bounds they held every slot for Config.IdleTimeout, and a
// probe waited that long.
func TestAdminListenerBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) {
		c.AdminListen = "127.0.0.1:0" // the fixture listens on a port of its own
		c.ReadHeaderTimeout, c.IdleTimeout = time.Minute, time.Minute
	})
	kept, refused := keepAlive(t, b.adminURL, otherAddr, 64)
	if len(kept) != 8 || refused != 56 {
		t.Fatalf("%d idle keep-alive connections kept and %d refused from one address, want 8 and 56", len(kept), refused)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.adminURL+"/readyz", nil)
	resp, err := clientFrom(t, "127.0.0.1").Do(req)
	if err != nil {
		t.Fatalf("/readyz from another address while one holds its most admin connections: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz on the admin listener: %d", resp.StatusCode)
	}

	start := time.Now()
	for _, c := range kept {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("an idle admin connection: read %d bytes, %v; want it closed by intake", n, err)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the idle admin connections were closed after %s, want within about 2s", d)
	}
}
