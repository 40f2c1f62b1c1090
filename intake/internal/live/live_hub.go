package live

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// This file owns the live streams' hub: one PostgreSQL listener for every
// stream of every poll, one read of a poll's figures per change (at most
// one per Config.LiveInterval), and each stream's mailbox, which keeps
// only the latest events so that a slow stream skips ahead rather than
// holds up the others. The streams themselves are live.go's.

// errLiveFull: the hub holds its most viewers. errLiveClosed: the hub was
// closed.
var (
	errLiveFull   = errors.New("live: too many viewers")
	errLiveClosed = errors.New("live: closed")
)

// liveHubConfig is what a liveHub needs.
type liveHubConfig struct {
	// read reads a poll's figures once and returns the events of them.
	read func(ctx context.Context, pollID string) ([]byte, error)
	// watch calls fn with each poll notified as changed, "" for any poll,
	// until ctx ends (ledger.Store.WatchResults).
	watch func(ctx context.Context, fn func(pollID string))
	// interval is the least time between two reads of a poll; changes
	// notified within it share the read that follows them.
	interval time.Duration
	// quiet reports whether a failed read is not worth a log line (a read
	// not sent while PostgreSQL does not answer); nil: none is.
	quiet func(error) bool
	// idle is how long the listener outlives the last viewer.
	idle time.Duration
	max  int // viewers at most
	log  *slog.Logger
}

// liveHub hands each poll's figures to the viewers of the poll, reading
// them once per change, at most once per interval.
type liveHub struct {
	cfg  liveHubConfig
	done chan struct{} // closed by close: every stream ends

	mu      sync.Mutex
	polls   map[string]*livePoll
	viewers int
	closed  bool
	// The listener, while it runs: its context (which the reads use) and
	// its cancel, and the timer that stops it once no one watches.
	ctx      context.Context
	stop     context.CancelFunc
	idleStop *time.Timer
	// listening ends when the listener returned.
	listening sync.WaitGroup
}

// livePoll is one poll that viewers watch.
type livePoll struct {
	id      string
	viewers map[*liveViewer]struct{}
	last    []byte      // the events of the last read; nil before the first
	timer   *time.Timer // a read is due
	reading bool        // a read is under way
	again   bool        // a change was notified while reading
}

// liveViewer is one stream's mailbox: the latest events not yet written.
// The hub never waits for a viewer: it replaces what the viewer has not
// taken yet, so a slow viewer skips to the latest state.
type liveViewer struct {
	poll *livePoll
	wake chan struct{} // a new frame is there

	mu    sync.Mutex
	frame []byte
}

func (v *liveViewer) offer(frame []byte) {
	v.mu.Lock()
	v.frame = frame
	v.mu.Unlock()
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// take returns the frame offered last and not taken yet, or nil.
func (v *liveViewer) take() []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	f := v.frame
	v.frame = nil
	return f
}

func newLiveHub(cfg liveHubConfig) *liveHub {
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	return &liveHub{cfg: cfg, done: make(chan struct{}), polls: map[string]*livePoll{}}
}

// subscribe adds a viewer of poll id, which gets the poll's latest figures
// at once (read now when the hub holds none) and each change after. It
// starts the listener when it does not run; ctx's values, not its
// cancellation, go to it.
func (h *liveHub) subscribe(ctx context.Context, id string) (*liveViewer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil, errLiveClosed
	case h.viewers >= h.cfg.max:
		return nil, errLiveFull
	}
	h.viewers++
	h.listen(ctx)
	lp := h.polls[id]
	if lp == nil {
		lp = &livePoll{id: id, viewers: map[*liveViewer]struct{}{}}
		h.polls[id] = lp
	}
	v := &liveViewer{poll: lp, wake: make(chan struct{}, 1)}
	lp.viewers[v] = struct{}{}
	if lp.last != nil {
		v.offer(lp.last)
	} else {
		h.schedule(lp, 0)
	}
	return v, nil
}

// unsubscribe removes v; the poll is forgotten with its last viewer, and
// the listener stops idle after the hub's last.
func (h *liveHub) unsubscribe(v *liveViewer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	lp := v.poll
	if _, ok := lp.viewers[v]; !ok {
		return
	}
	delete(lp.viewers, v)
	h.viewers--
	if len(lp.viewers) == 0 {
		if lp.timer != nil {
			lp.timer.Stop()
		}
		delete(h.polls, lp.id)
	}
	if h.viewers == 0 && h.stop != nil && !h.closed {
		h.idleStop = time.AfterFunc(h.cfg.idle, h.stopIdle)
	}
}

// stopIdle stops the listener unless someone watches again.
func (h *liveHub) stopIdle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.viewers == 0 && h.stop != nil {
		h.stopListener()
	}
}

// listen starts the listener unless it runs, and keeps it from stopping
// idle. h.mu is held.
func (h *liveHub) listen(ctx context.Context) {
	if h.idleStop != nil {
		h.idleStop.Stop()
		h.idleStop = nil
	}
	if h.stop != nil {
		return
	}
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	h.ctx, h.stop = lctx, stop
	h.listening.Go(func() { h.cfg.watch(lctx, h.notified) })
}

// stopListener stops the listener. h.mu is held.
func (h *liveHub) stopListener() {
	h.stop()
	h.ctx, h.stop = nil, nil
	if h.idleStop != nil {
		h.idleStop.Stop()
		h.idleStop = nil
	}
}

// notified schedules a read of poll id, or of every poll watched for "",
// within the interval.
func (h *liveHub) notified(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if id == "" {
		for _, lp := range h.polls {
			h.schedule(lp, h.cfg.interval)
		}
		return
	}
	if lp := h.polls[id]; lp != nil {
		h.schedule(lp, h.cfg.interval)
	}
}

// schedule has lp read after delay, unless a read is due already; during
// a read, it has the read followed by another. h.mu is held.
func (h *liveHub) schedule(lp *livePoll, delay time.Duration) {
	switch {
	case lp.reading:
		lp.again = true
	case lp.timer == nil:
		lp.timer = time.AfterFunc(delay, func() { h.read(lp) })
	}
}

// read reads lp's figures once and offers them to each of its viewers.
func (h *liveHub) read(lp *livePoll) {
	h.mu.Lock()
	if h.polls[lp.id] != lp || h.ctx == nil {
		h.mu.Unlock()
		return // no one watches it any more
	}
	lp.timer, lp.reading = nil, true
	ctx := h.ctx
	h.mu.Unlock()

	frame, err := h.cfg.read(ctx, lp.id)

	h.mu.Lock()
	defer h.mu.Unlock()
	lp.reading = false
	if h.polls[lp.id] != lp {
		return
	}
	switch {
	case err != nil:
		if ctx.Err() == nil && (h.cfg.quiet == nil || !h.cfg.quiet(err)) {
			h.cfg.log.LogAttrs(ctx, slog.LevelWarn, "live results read failed; trying again",
				slog.String("poll", lp.id), slog.String("error", err.Error()))
		}
		// Try again: the viewers would otherwise wait for the next vote.
		lp.again = false
		h.schedule(lp, max(h.cfg.interval, time.Second))
		return
	default:
		lp.last = frame
		for v := range lp.viewers {
			v.offer(frame)
		}
	}
	if lp.again {
		lp.again = false
		h.schedule(lp, h.cfg.interval)
	}
}

// close ends every stream and stops the listener, and refuses new viewers;
// it returns once the listener returned. Closing twice is safe.
func (h *liveHub) close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
		if h.stop != nil {
			h.stopListener()
		}
		for _, lp := range h.polls {
			if lp.timer != nil {
				lp.timer.Stop()
			}
		}
	}
	h.mu.Unlock()
	h.listening.Wait()
}
