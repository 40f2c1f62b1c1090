// Package live owns a poll's results as they change: GET
// /v1/polls/{poll_id}/live, the results as Server-Sent Events, fed by one
// hub that listens for the ledger's notifications, and GET
// /polls/{poll_id}, the live results page that reads that stream, with
// the bounds on streams in all, per client address and per principal. It
// only reads: the figures and checkpoints through the intake that mounts
// it (Reads, which knows whether PostgreSQL answers and keeps the results
// route's cache), the ledger's notifications from ledger.Store. It never
// writes the ledger, and never decides who a request is or what a
// principal may see: intake answers that (Auth, Catalog). Intake builds
// the mux and mounts Stream and Page on it.
package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/intake/internal/holds"
	"tally/intake/internal/problem"
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
	RoutePage   = "/polls/{poll_id}"
	RouteStream = "/v1/polls/{poll_id}/live"
)

// probLiveFull: Config.MaxLiveViewers streams are open; the client should
// try again after Retry-After. probLiveAddr, probLivePrincipal: the
// client's address, or its principal, holds its most streams
// (Config.MaxLivePerAddr, Config.MaxLivePerPrincipal).
var (
	probLiveFull      = problem.Type{Slug: "live-full", Title: "Too many live viewers"}
	probLiveAddr      = problem.Type{Slug: "live-address-limit", Title: "Too many live streams from your address"}
	probLivePrincipal = problem.Type{Slug: "live-principal-limit", Title: "Too many live streams of your principal"}
)

// liveFullRetry is the Retry-After of a stream refused for the bound.
const liveFullRetry = 10 * time.Second

// liveRetryMillis is the reconnection delay a stream asks of the browser.
const liveRetryMillis = 2000

// IsStream reports whether path is that of a live stream, which runs
// past intake's Config.RequestTimeout.
func IsStream(path string) bool {
	rest, ok := strings.CutPrefix(path, "/v1/polls/")
	if !ok {
		return false
	}
	id, ok := strings.CutSuffix(rest, "/live")
	return ok && id != "" && !strings.Contains(id, "/")
}

// Config is what the live routes take of intake's Config; each field is
// the one of that name there, whose comment says what it bounds.
type Config struct {
	MaxLiveViewers      int
	MaxLivePerAddr      int
	MaxLivePerPrincipal int
	LiveInterval        time.Duration
	LiveIdle            time.Duration
	LiveHeartbeat       time.Duration
	WriteTimeout        time.Duration
	ReadCacheTTL        time.Duration
}

// Auth is who a request is, as intake decides it.
type Auth interface {
	// Principal authenticates r by its bearer token and spends one of
	// its principal's reads, or answers (401, 429, 503) and returns
	// false.
	Principal(w http.ResponseWriter, r *http.Request) (id string, ok bool)
}

// Catalog is the catalog of polls intake holds in memory.
type Catalog interface {
	// Poll is poll id as the catalog holds it (without its eligibility
	// list) and whether principalID may vote on it, and so see its
	// results; ledger.ErrNotFound when it holds no such poll.
	Poll(id, principalID string) (p ledger.Poll, mayVote bool, err error)
}

// Reads is how the live routes read the ledger: through intake, which
// knows whether PostgreSQL answers and keeps the results route's cache.
type Reads interface {
	// Results is the poll's figures as GET /v1/polls/{poll_id}/results
	// answers them: read within Config.ReadCacheTTL, else now, else,
	// while PostgreSQL does not answer, the last read, stale.
	Results(ctx context.Context, id string) (res ledger.Results, stale bool, err error)
	// ReadResults reads the poll's figures now and keeps them for
	// Results.
	ReadResults(ctx context.Context, id string) (ledger.Results, error)
	// ReadLedger runs read, bounded by intake's Config.PostgresTimeout,
	// unless PostgreSQL is not to be tried now (an error Skipped
	// reports).
	ReadLedger(ctx context.Context, read func(context.Context) error) error
	// Skipped reports whether err is that of a read not sent, because
	// PostgreSQL did not answer the last one.
	Skipped(err error) bool
	// LedgerFailed logs err (unless Skipped) and answers 503.
	LedgerFailed(w http.ResponseWriter, r *http.Request, msg string, err error)
}

// Refusals count the streams refused, by bound: the bound in all, and
// those per client address and per principal.
type Refusals struct {
	Full, PerAddr, PerPrincipal prometheus.Counter
}

// Live serves the live page and stream. Create it with New.
type Live struct {
	cfg         Config
	store       *ledger.Store
	auth        Auth
	catalog     Catalog
	reads       Reads
	refused     Refusals
	log         *slog.Logger
	hub         *liveHub
	checkpoints *checkpointCache
	// perAddr and perPrincipal bound the streams of a client address and
	// of a principal (package holds).
	perAddr, perPrincipal *holds.Holds

	hooked sync.Map // *http.Server -> struct{}: its shutdown ends the streams
}

// New returns the live routes of store's polls. New does no I/O: the hub
// listens from the first stream on.
func New(cfg Config, store *ledger.Store, auth Auth, catalog Catalog, reads Reads, refused Refusals, log *slog.Logger) *Live {
	lv := &Live{cfg: cfg, store: store, auth: auth, catalog: catalog, reads: reads, refused: refused, log: log,
		perAddr: holds.New(cfg.MaxLivePerAddr), perPrincipal: holds.New(cfg.MaxLivePerPrincipal)}
	lv.checkpoints = newCheckpointCache(lv)
	lv.hub = newLiveHub(liveHubConfig{
		read: lv.readFrame, watch: store.WatchResults, quiet: reads.Skipped,
		interval: cfg.LiveInterval, idle: cfg.LiveIdle, max: cfg.MaxLiveViewers, log: log,
	})
	return lv
}

// readFrame reads poll id's results and latest checkpoint once, for every
// stream of the poll, and returns the events that say them. The figures
// also refresh the caches the results route and the page read from.
func (lv *Live) readFrame(ctx context.Context, id string) ([]byte, error) {
	// The checkpoint first: read before the results, its size is never
	// past their tree size.
	cp, err := lv.checkpoints.read(ctx, id)
	if err != nil {
		return nil, err
	}
	res, err := lv.reads.ReadResults(ctx, id)
	if err != nil {
		return nil, err
	}
	return liveFrame(res, cp)
}

// liveFrame is the events of one update: the results, and the checkpoint's
// size when there is one.
func liveFrame(res ledger.Results, checkpoint int64) ([]byte, error) {
	data, err := json.Marshal(res) // the results route's answer, which is never stale here
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

// Stream answers the poll's results as Server-Sent Events until the
// client goes, a write stalls (streamWriteTimeout), or the server shuts
// down. Beyond Config.MaxLivePerAddr streams of the client's address, or
// Config.MaxLivePerPrincipal of its principal, it answers 429
// live-address-limit or live-principal-limit; beyond
// Config.MaxLiveViewers in all, 503 live-full; each with Retry-After. To
// whoever may not see the poll's results, the 404 of an unknown poll.
func (lv *Live) Stream(w http.ResponseWriter, r *http.Request) {
	id, ok := problem.PathID(w, r, "poll_id", "poll id")
	if !ok {
		return
	}
	_, p, ok := lv.viewablePoll(w, r, id)
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
		lv.refused.Full.Inc()
		problem.Write(w, http.StatusServiceUnavailable, probLiveFull, fmt.Sprintf(
			"this intake serves %d live streams, its most: try again after the Retry-After delay, or reload the page, "+
				"which shows the figures without a stream", lv.cfg.MaxLiveViewers), liveFullRetry)
		return
	case err != nil:
		problem.Write(w, http.StatusServiceUnavailable, problem.Unavailable,
			"this intake is shutting down: retry after the Retry-After delay, another intake will answer", time.Second)
		return
	}
	defer lv.hub.unsubscribe(v)
	lv.stream(w, r, v)
}

// holdStream takes a stream's hold of its client address and, with a
// token, of its principal (none: ""), or answers 429 and returns false.
// release gives them back.
func (lv *Live) holdStream(w http.ResponseWriter, r *http.Request, principal string) (release func(), ok bool) {
	addr := lv.perAddr.AddrKey(r.RemoteAddr)
	if !lv.perAddr.Acquire(addr) {
		lv.refused.PerAddr.Inc()
		problem.Write(w, http.StatusTooManyRequests, probLiveAddr, fmt.Sprintf(
			"your address holds %d live streams of this intake, its most: close one (a page shows the figures without a stream) "+
				"and retry after the Retry-After delay", lv.cfg.MaxLivePerAddr), liveFullRetry)
		return nil, false
	}
	if principal == "" {
		return func() { lv.perAddr.Release(addr) }, true
	}
	key := lv.perPrincipal.StringKey(principal)
	if !lv.perPrincipal.Acquire(key) {
		lv.perAddr.Release(addr)
		lv.refused.PerPrincipal.Inc()
		problem.Write(w, http.StatusTooManyRequests, probLivePrincipal, fmt.Sprintf(
			"your principal holds %d live streams of this intake, its most: close one and retry after the Retry-After delay",
			lv.cfg.MaxLivePerPrincipal), liveFullRetry)
		return nil, false
	}
	return func() {
		lv.perPrincipal.Release(key)
		lv.perAddr.Release(addr)
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
func (lv *Live) stream(w http.ResponseWriter, r *http.Request, v *liveViewer) {
	rc := http.NewResponseController(w)
	// The stream outlives the server's write timeout, which would cut it
	// (HTTP/1) or reset it (HTTP/2), as intake's Config.RequestTimeout
	// would (intake sets none on a stream: IsStream). Each write sets a deadline of its own, past the next
	// heartbeat: over HTTP/2 the deadline runs while the stream waits for
	// its next event, and one shorter than the heartbeat would reset a
	// healthy stream. A client that stops reading is let go after it.
	timeout := streamWriteTimeout(lv.cfg)
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
	heartbeat := time.NewTicker(lv.cfg.LiveHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-v.wake:
			if b := v.take(); b != nil && !write(b) {
				return
			}
			heartbeat.Reset(lv.cfg.LiveHeartbeat)
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
func (lv *Live) hookShutdown(r *http.Request) {
	srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if !ok {
		return
	}
	if _, hooked := lv.hooked.LoadOrStore(srv, struct{}{}); !hooked {
		srv.RegisterOnShutdown(lv.hub.close)
	}
}
