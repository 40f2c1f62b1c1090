package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"tally/ledger"
)

// This file owns GET /v1/polls/{poll_id}/live: the poll's results as
// Server-Sent Events, which the live page's script reads. Every stream of
// every poll is fed by one hub with one PostgreSQL connection listening for
// the notifications an append sends once it has committed
// (ledger.Store.WatchResults). Per notified poll the hub reads the results
// once, at most once per Config.LiveInterval (a burst of appends costs one
// read), and hands the same event to each stream of the poll; a stream
// that cannot keep up skips to the latest state, and never holds up the
// others. A thousand viewers of a poll cost intake one listener and one
// query per update.
//
// The stream: each "results" event is the poll's whole state, the JSON of
// GET /v1/polls/{poll_id}/results, with the tree size as its id; a
// "checkpoint" event, {"size": N}, gives the latest signed checkpoint's
// size when the poll has one. A new stream gets the current state at once,
// so a client that reconnects (with Last-Event-ID or not) misses nothing:
// nothing is replayed, since no event is needed but the last. A comment
// goes out every Config.LiveHeartbeat while nothing else does, so that
// proxies keep the connection open.
//
// The hub listens only while someone watches: its listener starts with the
// first stream and stops Config.LiveIdle after the last one ended. The
// server's shutdown ends every stream at once (the browser reconnects to
// another intake) and stops the listener.

// Route templates of the live page and stream, also the route labels of
// the metrics.
const (
	routePage = "/polls/{poll_id}"
	routeLive = "/v1/polls/{poll_id}/live"
)

// probLiveFull: Config.MaxLiveViewers streams are open; the client should
// try again after Retry-After. probLiveAddr, probLivePrincipal: the
// client's address, or its principal, holds its most streams
// (Config.MaxLivePerAddr, Config.MaxLivePerPrincipal).
var (
	probLiveFull      = problemType{"live-full", "Too many live viewers"}
	probLiveAddr      = problemType{"live-address-limit", "Too many live streams from your address"}
	probLivePrincipal = problemType{"live-principal-limit", "Too many live streams of your principal"}
)

// liveFullRetry is the Retry-After of a stream refused for the bound.
const liveFullRetry = 10 * time.Second

// liveRetryMillis is the reconnection delay a stream asks of the browser.
const liveRetryMillis = 2000

// isLiveStream reports whether path is that of a live stream, which runs
// past Config.RequestTimeout (see instrument).
func isLiveStream(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v1/polls/")
	if !ok {
		return false
	}
	id, ok := strings.CutSuffix(rest, "/live")
	return ok && id != "" && !strings.Contains(id, "/")
}

// live serves the live page and stream of a Server.
type live struct {
	s           *Server
	hub         *liveHub
	checkpoints *checkpointCache
	// perAddr and perPrincipal bound the streams of a client address and
	// of a principal (holds.go).
	perAddr, perPrincipal *holds

	hooked sync.Map // *http.Server -> struct{}: its shutdown ends the streams
}

func newLive(s *Server) *live {
	lv := &live{s: s, checkpoints: newCheckpointCache(s),
		perAddr: newHolds(s.cfg.MaxLivePerAddr), perPrincipal: newHolds(s.cfg.MaxLivePerPrincipal)}
	lv.hub = newLiveHub(liveHubConfig{
		read: lv.readFrame, watch: s.store.WatchResults,
		interval: s.cfg.LiveInterval, idle: s.cfg.LiveIdle, max: s.cfg.MaxLiveViewers, log: s.log,
	})
	return lv
}

// readFrame reads poll id's results and latest checkpoint once, for every
// stream of the poll, and returns the events that say them. The figures
// also refresh the caches the results route and the page read from.
func (lv *live) readFrame(ctx context.Context, id string) ([]byte, error) {
	s := lv.s
	// The checkpoint first: read before the results, its size is never
	// past their tree size.
	cp, err := lv.checkpoints.read(ctx, id)
	if err != nil {
		return nil, err
	}
	var res ledger.Results
	err = s.readLedger(ctx, func(ctx context.Context) (err error) {
		s.metrics.resultsReads.Inc()
		res, err = s.store.Results(ctx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.results.put(id, resultsRead{res: res, read: time.Now()})
	return liveFrame(res, cp)
}

// liveFrame is the events of one update: the results, and the checkpoint's
// size when there is one.
func liveFrame(res ledger.Results, checkpoint int64) ([]byte, error) {
	data, err := json.Marshal(resultsAnswer{Results: res})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: results\nid: %d\ndata: %s\n\n", res.TreeSize, data)
	if checkpoint > 0 {
		fmt.Fprintf(&b, "event: checkpoint\ndata: {\"size\":%d}\n\n", checkpoint)
	}
	return b.Bytes(), nil
}

// handleStream answers the poll's results as Server-Sent Events until the
// client goes, a write stalls (streamWriteTimeout), or the server shuts
// down. Beyond Config.MaxLivePerAddr streams of the client's address, or
// Config.MaxLivePerPrincipal of its principal, it answers 429
// live-address-limit or live-principal-limit; beyond
// Config.MaxLiveViewers in all, 503 live-full; each with Retry-After. To
// whoever may not see the poll's results, the 404 of an unknown poll.
func (lv *live) handleStream(w http.ResponseWriter, r *http.Request) {
	s := lv.s
	id, ok := pathID(w, r, "poll_id", "poll id")
	if !ok {
		return
	}
	_, p, ok := s.viewablePoll(w, r, id)
	if !ok {
		return
	}
	if r.Method == http.MethodHead {
		setStreamHeaders(w)
		w.WriteHeader(http.StatusOK)
		return
	}
	release, ok := lv.holdStream(w, r, p)
	if !ok {
		return
	}
	defer release()
	lv.hookShutdown(r)
	v, err := lv.hub.subscribe(r.Context(), id)
	switch {
	case errors.Is(err, errLiveFull):
		s.metrics.bounds.WithLabelValues(boundLive).Inc()
		writeProblem(w, http.StatusServiceUnavailable, probLiveFull, fmt.Sprintf(
			"this intake serves %d live streams, its most: try again after the Retry-After delay, or reload the page, "+
				"which shows the figures without a stream", s.cfg.MaxLiveViewers), liveFullRetry)
		return
	case err != nil:
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"this intake is shutting down: retry after the Retry-After delay, another intake will answer", time.Second)
		return
	}
	defer lv.hub.unsubscribe(v)
	lv.stream(w, r, v)
}

// holdStream takes a stream's hold of its client address and, with a
// token, of its principal p, or answers 429 and returns false. release
// gives them back.
func (lv *live) holdStream(w http.ResponseWriter, r *http.Request, p *voter) (release func(), ok bool) {
	s := lv.s
	addr := lv.perAddr.addrKey(r.RemoteAddr)
	if !lv.perAddr.acquire(addr) {
		s.metrics.bounds.WithLabelValues(boundLivePerAddr).Inc()
		writeProblem(w, http.StatusTooManyRequests, probLiveAddr, fmt.Sprintf(
			"your address holds %d live streams of this intake, its most: close one (a page shows the figures without a stream) "+
				"and retry after the Retry-After delay", s.cfg.MaxLivePerAddr), liveFullRetry)
		return nil, false
	}
	if p == nil {
		return func() { lv.perAddr.release(addr) }, true
	}
	principal := lv.perPrincipal.stringKey(p.ID)
	if !lv.perPrincipal.acquire(principal) {
		lv.perAddr.release(addr)
		s.metrics.bounds.WithLabelValues(boundLivePerPrincipal).Inc()
		writeProblem(w, http.StatusTooManyRequests, probLivePrincipal, fmt.Sprintf(
			"your principal holds %d live streams of this intake, its most: close one and retry after the Retry-After delay",
			s.cfg.MaxLivePerPrincipal), liveFullRetry)
		return nil, false
	}
	return func() {
		lv.perPrincipal.release(principal)
		lv.perAddr.release(addr)
	}, true
}

// streamWriteTimeout is how long a live stream's write may take, counted
// from the write before it: the heartbeat interval, so that the next
// heartbeat goes out before it, plus Config.WriteTimeout for the write
// itself.
func streamWriteTimeout(cfg Config) time.Duration { return cfg.LiveHeartbeat + cfg.WriteTimeout }

func setStreamHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy that buffers answers would hold the events back
}

// stream writes v's events to w until the client goes, a write stalls or
// the hub closes.
func (lv *live) stream(w http.ResponseWriter, r *http.Request, v *liveViewer) {
	s := lv.s
	rc := http.NewResponseController(w)
	// The stream outlives the server's write timeout, which would cut it
	// (HTTP/1) or reset it (HTTP/2), as it does Config.RequestTimeout (see
	// instrument). Each write sets a deadline of its own, past the next
	// heartbeat: over HTTP/2 the deadline runs while the stream waits for
	// its next event, and one shorter than the heartbeat would reset a
	// healthy stream. A client that stops reading is let go after it.
	timeout := streamWriteTimeout(s.cfg)
	write := func(b []byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	setStreamHeaders(w)
	w.WriteHeader(http.StatusOK)
	if !write([]byte("retry: " + strconv.Itoa(liveRetryMillis) + "\n\n")) {
		return
	}
	heartbeat := time.NewTicker(s.cfg.LiveHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-v.wake:
			if b := v.take(); b != nil && !write(b) {
				return
			}
			heartbeat.Reset(s.cfg.LiveHeartbeat)
		case <-heartbeat.C:
			if !write([]byte(": heartbeat\n\n")) {
				return
			}
		case <-r.Context().Done():
			return
		case <-lv.hub.done:
			return
		}
	}
}

// hookShutdown has the shutdown of the http.Server serving r end every
// stream at once, rather than let them hold the drain until
// Config.ShutdownTimeout. It hooks each server once.
func (lv *live) hookShutdown(r *http.Request) {
	srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if !ok {
		return
	}
	if _, hooked := lv.hooked.LoadOrStore(srv, struct{}{}); !hooked {
		srv.RegisterOnShutdown(lv.hub.close)
	}
}
