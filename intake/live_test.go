package intake_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// This file tests the live results page and stream over HTTP: who may see
// them, that the stream delivers an append's figures and outlives the
// request's deadlines, the bound on streams, and that shutdown ends them.
// The hub's own rules are in live_hub_test.go, the page in a browser in
// page_browser_test.go.

// publicPoll creates the public poll "pub" with choices a, b and c.
func publicPoll(t testing.TB, b *bundle) {
	t.Helper()
	b.poll(t, ledger.Poll{ID: "pub", Title: "Pick one", Choices: []string{"a", "b", "c"}, PublicResults: true})
}

// appendTo records a vote on poll for candidate of a new principal per
// key, as the projector would.
func appendTo(t testing.TB, b *bundle, poll, candidate string, keys ...string) {
	t.Helper()
	var events []ledger.Event
	for _, k := range keys {
		events = append(events, ledger.Event{PrincipalID: "pr-" + k, ClientEventID: k, PollID: poll, CandidateID: candidate,
			ReceivedAt: time.Now()})
	}
	outs, err := b.store.Append(context.Background(), events)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if o.Status != ledger.StatusRecorded {
			t.Fatalf("append %s: %s %s", keys[i], o.Status, o.Reason)
		}
	}
}

// sse is one event of a stream.
type sse struct {
	event, id, data string
}

// liveStream is an open GET /v1/polls/{poll_id}/live.
type liveStream struct {
	resp   *http.Response
	events chan sse
	lines  chan string // every line read, comments included
	done   chan struct{}
}

// openLive opens poll's stream (with token, unless it is "") and checks
// its answer against the OpenAPI document; it fails t unless the answer
// is 200. The stream is closed when t ends.
func openLive(t *testing.T, b *bundle, poll, token string) *liveStream {
	t.Helper()
	return openLiveFrom(t, b, poll, token, "")
}

// openLiveFrom is openLive from the local address ip ("": any).
func openLiveFrom(t *testing.T, b *bundle, poll, token, ip string) *liveStream {
	t.Helper()
	resp := getLiveFrom(t, b, poll, token, ip)
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET /v1/polls/%s/live: %d %s", poll, resp.StatusCode, raw)
	}
	checkLiveAnswer(t, resp, nil)
	ls := &liveStream{resp: resp, events: make(chan sse, 100), lines: make(chan string, 1000), done: make(chan struct{})}
	go ls.read()
	t.Cleanup(func() {
		resp.Body.Close()
		select {
		case <-ls.done:
		case <-time.After(10 * time.Second):
			t.Errorf("the stream of poll %s still reads 10s after its body was closed", poll)
		}
	})
	return ls
}

func getLive(t *testing.T, b *bundle, poll, token string) *http.Response {
	t.Helper()
	return getLiveFrom(t, b, poll, token, "")
}

// getLiveFrom is getLive from the local address ip ("": any).
func getLiveFrom(t *testing.T, b *bundle, poll, token, ip string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/v1/polls/"+poll+"/live", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// A client of its own: the bundle's has a timeout, which a stream
	// outlives. The answer's header is still waited for at most 10s.
	timer := time.AfterFunc(10*time.Second, cancel)
	client := &http.Client{}
	if ip != "" {
		client.Transport = &http.Transport{DialContext: dialerFrom(ip).DialContext}
	}
	resp, err := client.Do(req)
	if !timer.Stop() {
		t.Fatalf("GET /v1/polls/%s/live: no answer within 10s (%v)", poll, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// checkLiveAnswer checks a stream's answer (its body too when it ended)
// against the OpenAPI document.
func checkLiveAnswer(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckAnswer(resp.Request.Method, resp.Request.URL.RequestURI(), resp.StatusCode, resp.Header, body); err != nil {
		t.Errorf("OpenAPI contract: %v", err)
	}
}

// read parses the stream into events until it ends.
func (ls *liveStream) read() {
	defer close(ls.done)
	defer close(ls.events)
	r := bufio.NewReader(ls.resp.Body)
	var ev sse
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(line, "\n")
		select {
		case ls.lines <- line:
		default:
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if ev.data != "" {
				ls.events <- ev
			}
			ev = sse{}
		case field == "event":
			ev.event = value
		case field == "id":
			ev.id = value
		case field == "data":
			ev.data = value
		}
	}
}

// nextResults waits for the next results event, skipping others; it
// returns ok false when the stream ended first.
func (ls *liveStream) nextResults(t *testing.T, within time.Duration) (ledger.Results, bool) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case ev, ok := <-ls.events:
			if !ok {
				return ledger.Results{}, false
			}
			if ev.event != "results" {
				continue
			}
			var r ledger.Results
			if err := json.Unmarshal([]byte(ev.data), &r); err != nil {
				t.Fatalf("results event %q: %v", ev.data, err)
			}
			if ev.id != strconv.FormatInt(r.TreeSize, 10) {
				t.Errorf("results event id %q, want its tree size %d", ev.id, r.TreeSize)
			}
			return r, true
		case <-timeout:
			t.Fatalf("no results event within %s", within)
		}
	}
}

// waitTotal waits for a results event whose total is want.
func (ls *liveStream) waitTotal(t *testing.T, want int64, within time.Duration) ledger.Results {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, ok := ls.nextResults(t, time.Until(deadline))
		if !ok {
			t.Fatalf("the stream ended before a total of %d", want)
		}
		if r.Total == want {
			return r
		}
	}
}

// TestLiveVisibility: the page, the stream and the results of a poll
// whose results are public are served without a token; those of a poll that is not
// public answer a request without a token, or with the token of a
// principal outside a restricted poll's list, the very 404 of an unknown
// poll, and serve a principal that may see its results. A bad token is
// refused whatever the poll.
func TestLiveVisibility(t *testing.T) {
	t.Parallel()
	b := setup(t)
	publicPoll(t, b)
	_, outsiderToken := b.principal(t, "outsider")
	b.poll(t, ledger.Poll{ID: "club", Title: "Members only", Choices: []string{"a", "b"}, Eligible: []string{b.who.ID}})
	base := logSize(t, b, "pub") // the definition's leaf; the votes follow
	appendTo(t, b, "pub", "b", "k1", "k2")

	page := b.do(t, http.MethodGet, "/polls/pub", "", "", nil)
	if page.code != http.StatusOK || page.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("the public page: %d %q %s", page.code, page.header.Get("Content-Type"), page.raw)
	}
	for _, want := range []string{"<title>Pick one · live results</title>", `data-candidate="b"`, `<span class="count">2</span>`,
		`<span class="share">100.0%</span>`, `<strong id="total">2</strong>`, fmt.Sprintf(`<strong id="tree-size">%d</strong>`, base+2), "none yet"} {
		if !strings.Contains(page.raw, want) {
			t.Errorf("the public page lacks %q:\n%s", want, page.raw)
		}
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'sha256-") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	ls := openLive(t, b, "pub", "")
	if r, _ := ls.nextResults(t, 5*time.Second); r.PollID != "pub" || r.Total != 2 || len(r.Results) != 3 || r.Results[1].Votes != 2 {
		t.Fatalf("first event of the public stream: %+v", r)
	}
	// The results route answers a public poll without a token too; any
	// other poll, known or not, asks for one.
	if r := b.do(t, http.MethodGet, "/v1/polls/pub/results", "", "", nil); r.code != http.StatusOK || r.body["total"] != 2.0 {
		t.Fatalf("the public poll's results without a token: %d %s", r.code, r.raw)
	}
	wantProblemType(t, b.do(t, http.MethodGet, "/v1/polls/nope/results", "", "", nil), http.StatusUnauthorized, "unauthorized")

	unknown := b.do(t, http.MethodGet, "/polls/nope", "", "", nil)
	wantProblemType(t, unknown, http.StatusNotFound, "unknown-poll")
	// hidden checks that the page or stream of poll answers as for an
	// unknown poll.
	hidden := func(poll, token string, stream bool) {
		t.Helper()
		var r reply
		if stream {
			resp := getLive(t, b, poll, token)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			checkLiveAnswer(t, resp, raw)
			r = reply{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
			_ = json.Unmarshal(raw, &r.body)
		} else {
			r = b.do(t, http.MethodGet, "/polls/"+poll, token, "", nil)
		}
		wantProblemType(t, r, http.StatusNotFound, "unknown-poll")
		if want := strings.ReplaceAll(unknown.str("detail"), `"nope"`, strconv.Quote(poll)); r.str("detail") != want {
			t.Errorf("%s (stream %v): detail %q, want the unknown poll's %q", poll, stream, r.str("detail"), want)
		}
	}
	hidden("p1", "", false)
	hidden("p1", "", true)
	hidden("club", outsiderToken, false)
	hidden("club", outsiderToken, true)

	// A principal that may see the results is served.
	if r := b.do(t, http.MethodGet, "/polls/club", b.token, "", nil); r.code != http.StatusOK {
		t.Fatalf("the restricted page to an eligible principal: %d %s", r.code, r.raw)
	}
	if r, _ := openLive(t, b, "p1", b.token).nextResults(t, 5*time.Second); r.PollID != "p1" {
		t.Fatalf("the stream of p1 to a principal: %+v", r)
	}
	// A token is checked whatever the poll.
	wantProblemType(t, b.do(t, http.MethodGet, "/polls/pub", "nope", "", nil), http.StatusUnauthorized, "unauthorized")
	// HEAD answers the stream's headers alone.
	if r := b.do(t, http.MethodHead, "/v1/polls/pub/live", "", "", nil); r.code != http.StatusOK ||
		r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HEAD of the stream: %d %q", r.code, r.header.Get("Content-Type"))
	}
}

// TestLivePageEscapes: a poll's title is text on the page, never markup.
func TestLivePageEscapes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, ledger.Poll{ID: "x", Title: `<script>alert("x")</script> & co`, Choices: []string{"a"}, PublicResults: true})
	r := b.do(t, http.MethodGet, "/polls/x", "", "", nil)
	if r.code != http.StatusOK || strings.Contains(r.raw, `<script>alert`) || !strings.Contains(r.raw, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; co") {
		t.Fatalf("the title is not escaped: %d\n%s", r.code, r.raw)
	}
}

// TestLiveStreamDeliversAppends: the stream sends the figures at once,
// then the figures of each append (one notification per batch), and keeps
// going past the request deadline, the read timeout and the write
// timeout, with heartbeats while nothing changes.
func TestLiveStreamDeliversAppends(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) {
		c.RequestTimeout, c.ReadTimeout, c.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond, 400*time.Millisecond
		c.LiveHeartbeat = 100 * time.Millisecond
	})
	publicPoll(t, b)
	base := logSize(t, b, "pub") // the definition's leaf; the votes follow
	ls := openLive(t, b, "pub", "")
	if r, _ := ls.nextResults(t, 5*time.Second); r.Total != 0 || r.TreeSize != base {
		t.Fatalf("first event: %+v, want total 0 and tree size %d (the definition alone)", r, base)
	}
	time.Sleep(time.Second) // past every deadline of the request
	appendTo(t, b, "pub", "a", "k1", "k2", "k3")
	start := time.Now()
	r := ls.waitTotal(t, 3, 5*time.Second)
	if r.Results[0].Votes != 3 || r.TreeSize != base+3 {
		t.Fatalf("after the append: %+v, want 3 votes for a and tree size %d", r, base+3)
	}
	t.Logf("an append reached the stream in %s", time.Since(start))
	appendTo(t, b, "pub", "c", "k4")
	if r := ls.waitTotal(t, 4, 5*time.Second); r.Results[2].Votes != 1 {
		t.Fatalf("after the second append: %+v", r)
	}
	heartbeats := 0
	for timeout := time.After(5 * time.Second); heartbeats < 2; {
		select {
		case l := <-ls.lines:
			if strings.HasPrefix(l, ":") {
				heartbeats++
			}
		case <-timeout:
			t.Fatalf("%d heartbeats within 5s, want 2 at least", heartbeats)
		}
	}
}

// TestLiveViewersBound: past Config.MaxLiveViewers streams, a stream is
// refused with 503 live-full and Retry-After; one ending frees its place.
func TestLiveViewersBound(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.MaxLiveViewers = 2 })
	publicPoll(t, b)
	first := openLive(t, b, "pub", "")
	openLive(t, b, "pub", "")
	resp := getLive(t, b, "pub", "")
	if resp.StatusCode == http.StatusOK {
		// Its body would not end: read none of it.
		resp.Body.Close()
		t.Fatal("a third stream was opened (200) with MaxLiveViewers 2 streams open")
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	checkLiveAnswer(t, resp, raw)
	r := reply{code: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	wantProblemType(t, r, http.StatusServiceUnavailable, "live-full")
	if ra := resp.Header.Get("Retry-After"); ra != "10" {
		t.Fatalf("Retry-After %q, want 10", ra)
	}
	first.resp.Body.Close()
	testenv.Receive(t, first.done, 10*time.Second, "the first stream to end once its body was closed")
	testenv.Eventually(t, 5*time.Second, "a place freed for a third stream", func() bool {
		resp := getLive(t, b, "pub", "")
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestLiveShutdown: stopping intake ends its streams at once, rather than
// after Config.ShutdownTimeout, and its listener with them.
func TestLiveShutdown(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := stream.NewKeys(prefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := intake.New(intake.Config{ShutdownTimeout: 20 * time.Second}, store, rdb, keys, testLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	b := &bundle{store: store, url: "http://" + ln.Addr().String(), srv: srv}
	publicPoll(t, b)
	ls := openLive(t, b, "pub", "")
	if _, ok := ls.nextResults(t, 5*time.Second); !ok {
		t.Fatal("no first event")
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s of its context's end with a stream open")
	}
	select {
	case <-ls.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end with the server")
	}
	t.Logf("shutdown with a stream open took %s", time.Since(start))
	var listeners int
	testenv.Eventually(t, 5*time.Second, "the listener gone", func() bool {
		err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN tally_results'`).Scan(&listeners)
		return err == nil && listeners == 0
	})
}

// ExampleConfig_live names the settings of the live page and stream.
func ExampleConfig_live() {
	def := intake.DefaultConfig()
	fmt.Println(def.MaxLiveViewers, def.LiveHeartbeat, def.LiveInterval, def.LiveIdle)
	// Output: 5000 15s 200ms 30s
}
