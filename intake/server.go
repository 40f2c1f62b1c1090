package intake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"tally/vote"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"tally/ledger"
	"tally/stream"
)

// Server is the intake daemon. Create it with New; serve with Run or Serve.
type Server struct {
	cfg      Config
	store    *ledger.Store
	rdb      redis.UniversalClient
	keys     stream.Keys
	log      *slog.Logger
	metrics  *metrics
	gatherer prometheus.Gatherer // nil when reg does not gather
	breaker  *gobreaker.CircuitBreaker[any]
	batcher  *batcher
	auth     *authCache
	catalog  *catalog
	handler  http.Handler

	// scriptConsts are the arguments of the enqueue script that are the
	// same for every vote: the GCRA emission interval and burst tolerance
	// (µs), the idempotency record's lifetime (ms) and the max backlog.
	scriptConsts [4]any
	// streamKeyArgs are the stream keys by shard, boxed once.
	streamKeyArgs []any

	runOnce sync.Once
}

// New returns a Server on store and rdb. keys must match the projector's.
// Metrics are registered on reg, and /metrics serves reg when it is also a
// prometheus.Gatherer (a *prometheus.Registry is both); a nil reg gets a
// fresh registry. New does no I/O. rdb should bound each command by its
// context's deadline (redis.Options.ContextTimeoutEnabled, as tally intake
// sets it): a vote's pipeline ends at the deadline of its votes that way.
func New(cfg Config, store *ledger.Store, rdb redis.UniversalClient, keys stream.Keys, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if store == nil || rdb == nil {
		return nil, errors.New("intake: a ledger store and a Redis client are required")
	}
	if keys.Shards() == 0 {
		return nil, errors.New("intake: stream keys are not set; use stream.NewKeys")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, store: store, rdb: rdb, keys: keys,
		log:     logger.With(slog.String("component", "intake")),
		metrics: m,
		scriptConsts: [4]any{
			strconv.FormatFloat(1e6/cfg.Rate, 'f', 3, 64),
			strconv.FormatFloat(1e6/cfg.Rate*float64(cfg.Burst), 'f', 3, 64),
			strconv.FormatInt(cfg.IdempotencyWindow.Milliseconds(), 10),
			strconv.FormatInt(cfg.MaxBacklog, 10),
		},
	}
	for _, k := range keys.Streams() {
		s.streamKeyArgs = append(s.streamKeyArgs, k)
	}
	s.gatherer, _ = reg.(prometheus.Gatherer)
	s.breaker = newBreaker(cfg, func(from, to gobreaker.State) {
		m.breakerState.Set(breakerValue(to))
		s.log.Warn("redis circuit breaker changed state",
			slog.String("from", from.String()), slog.String("to", to.String()))
	})
	s.batcher = newBatcher(rdb, cfg, m.batchSize)
	s.auth = newAuthCache(store, keys, cfg)
	s.catalog = newCatalog(store, s.log, cfg, s.auth.clear)
	s.handler = s.routes()
	return s, nil
}

// Handler is the HTTP handler of every route, for tests and embedding. The
// catalog is only kept fresh (NOTIFY and periodic reloads) while Run or
// Serve runs.
func (s *Server) Handler() http.Handler { return s.handler }

// Run listens on Config.Listen and serves until ctx is cancelled; see
// Serve.
func (s *Server) Run(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("intake: listen on %s: %w (is another process using it? set --listen)", s.cfg.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is cancelled, then stops accepting, drains
// the requests in flight within Config.ShutdownTimeout (closing whatever is
// left after it) and returns nil. It returns an error when serving failed.
// A Server serves once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	served := false
	s.runOnce.Do(func() { served = true })
	if !served {
		ln.Close()
		return errors.New("intake: a Server serves once")
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}

	bgCtx, stopBackground := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { s.catalog.run(bgCtx) })
	defer func() {
		stopBackground()
		bg.Wait()
	}()

	s.log.LogAttrs(ctx, slog.LevelInfo, "intake serving", slog.String("addr", ln.Addr().String()),
		slog.Int("shards", s.keys.Shards()), slog.String("stream_prefix", s.keys.Prefix()))
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("intake: serve: %w", err)
	case <-ctx.Done():
	}

	s.log.LogAttrs(ctx, slog.LevelInfo, "intake shutting down", slog.Duration("drain_within", s.cfg.ShutdownTimeout))
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(drainCtx); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "drain did not finish in time; closing the remaining connections",
			slog.String("error", err.Error()))
		srv.Close()
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("intake: serve: %w", err)
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "intake stopped")
	return nil
}

// Route templates, also the route label of the metrics.
const (
	routeVotes   = "/v1/votes"
	routeVote    = "/v1/votes/{event_id}"
	routeResults = "/v1/polls/{poll_id}/results"
	routeHealth  = "/healthz"
	routeReady   = "/readyz"
	routeMetrics = "/metrics"
	routeOther   = "other"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(routeVotes, allow(http.MethodPost, s.handleVote))
	mux.Handle(routeVote, allow(http.MethodGet, s.handleStatus))
	mux.Handle(routeResults, allow(http.MethodGet, s.handleResults))
	mux.Handle(routeHealth, allow(http.MethodGet, s.handleHealth))
	mux.Handle(routeReady, allow(http.MethodGet, s.handleReady))
	if s.gatherer != nil {
		mux.Handle(routeMetrics, allow(http.MethodGet, promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}).ServeHTTP))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, probNotFound,
			"no such route: intake serves POST /v1/votes, GET /v1/votes/{event_id}, GET /v1/polls/{poll_id}/results, /healthz, /readyz and /metrics", 0)
	})
	return s.instrument(mux)
}

// allow answers 405 to any method but method (and HEAD for GET).
func allow(method string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			writeProblem(w, http.StatusMethodNotAllowed, probMethod,
				fmt.Sprintf("%s takes %s, not %s", r.URL.Path, method, r.Method), 0)
			return
		}
		h(w, r)
	})
}

// statusWriters recycles statusWriters once their request is answered.
var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument bounds each request by Config.RequestTimeout and counts it by
// route template and status code. A vote is bounded without a context of
// its own: see handleVote.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if r.URL.Path != routeVotes {
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		ctx := r.Context()
		sw := statusWriters.Get().(*statusWriter)
		*sw = statusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.LogAttrs(ctx, slog.LevelError, "handler panicked", slog.String("route", r.Pattern),
					slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
				if sw.code == 0 {
					writeProblem(sw, http.StatusInternalServerError, probInternal,
						"intake failed on this request; it has been logged: retry later, and report it if it persists", 0)
				}
			}
			s.observe(r, sw, start)
			*sw = statusWriter{}
			statusWriters.Put(sw)
		}()
		next.ServeHTTP(sw, r)
	})
}

// observe counts a request by route template and status code.
func (s *Server) observe(r *http.Request, sw *statusWriter, start time.Time) {
	route := r.Pattern
	if route == "" || route == "/" {
		route = routeOther
	}
	code := sw.code
	if code == 0 {
		code = http.StatusOK
	}
	rm := s.metrics.route(route)
	rm.request(code)
	rm.duration.Observe(time.Since(start).Seconds())
}

// principal authenticates the request, or answers 401 or 503 and returns
// false.
func (s *Server) principal(w http.ResponseWriter, r *http.Request) (*voter, bool) {
	return s.principalBy(w, r, time.Time{})
}

// principalBy is principal with a lookup in PostgreSQL bounded by deadline
// too, unless it is zero.
func (s *Server) principalBy(w http.ResponseWriter, r *http.Request, deadline time.Time) (*voter, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, found := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if h == "" {
		writeProblem(w, http.StatusUnauthorized, probUnauthorized,
			"the request has no Authorization header: send \"Authorization: Bearer TOKEN\" with your principal's token", 0)
		return nil, false
	}
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		writeProblem(w, http.StatusUnauthorized, probUnauthorized,
			"the Authorization header is not of the form \"Bearer TOKEN\": send your principal's token that way", 0)
		return nil, false
	}
	p, err := s.auth.authenticate(r.Context(), token, deadline)
	switch {
	case errors.Is(err, errUnauthenticated):
		writeProblem(w, http.StatusUnauthorized, probUnauthorized,
			"the bearer token is unknown or revoked: ask an operator for a valid token", 0)
		return nil, false
	case err != nil:
		s.failed(r, "authentication failed: PostgreSQL did not answer", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the token could not be checked because the database did not answer: retry after the Retry-After delay", time.Second)
		return nil, false
	}
	return p, true
}

// failed logs an error that made a request fail: a warning, unless the
// client had gone away, which is no news.
func (s *Server) failed(r *http.Request, msg string, err error) {
	level := slog.LevelWarn
	if errors.Is(err, context.Canceled) || r.Context().Err() == context.Canceled {
		level = slog.LevelDebug
	}
	s.log.LogAttrs(r.Context(), level, msg, slog.String("route", r.Pattern), slog.String("error", err.Error()))
}

// Header values every answer of a kind shares. net/http only reads them
// (Header.Clone copies), and a slice of one value is full, so an Add to one
// of them copies it first.
var (
	headerJSON    = []string{"application/json"}
	headerNoStore = []string{"no-store"}
)

// acceptedBufs recycles the buffers 202 bodies are built in (net/http
// copies what is written); acceptedBufSize holds one for an event id of
// the 64 characters at most that ids have.
const acceptedBufSize = 96 + 2*64

var acceptedBufs = sync.Pool{New: func() any { return new([acceptedBufSize]byte) }}

// writeAccepted answers 202 with
// {"event_id": ..., "status": "pending", "status_url": "/v1/votes/{event_id}"}.
// The event id is made of id characters only, so it needs no escaping.
func writeAccepted(w http.ResponseWriter, eventID string) {
	url := "/v1/votes/" + eventID
	h := w.Header()
	h["Location"] = []string{url}
	h["Content-Type"] = headerJSON
	h["Cache-Control"] = headerNoStore
	w.WriteHeader(http.StatusAccepted)
	buf := acceptedBufs.Get().(*[acceptedBufSize]byte)
	defer acceptedBufs.Put(buf)
	b := buf[:0]
	b = append(b, `{"event_id":"`...)
	b = append(b, eventID...)
	b = append(b, `","status":"pending","status_url":"`...)
	b = append(b, url...)
	b = append(b, "\"}\n"...)
	w.Write(b)
}

// handleVote takes POST /v1/votes. Its deadline, Config.RequestTimeout
// after receivedAt, is not a context: a context with a timer per request
// costs more than a vote's own work. The lookups that can go to PostgreSQL
// (a token or poll not cached) bound themselves by it, and the batcher
// answers the enqueue by it.
func (s *Server) handleVote(w http.ResponseWriter, r *http.Request) {
	receivedAt := time.Now()
	deadline := receivedAt.Add(s.cfg.RequestTimeout)
	p, ok := s.principalBy(w, r, deadline)
	if !ok {
		return
	}
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		got := "no Content-Type"
		if ct != "" {
			got = "Content-Type " + strconv.Quote(ct)
		}
		writeProblem(w, http.StatusUnsupportedMediaType, probMediaType,
			"the request has "+got+": send the vote as Content-Type: application/json", 0)
		return
	}
	if r.ContentLength > maxBodyBytes {
		writeProblem(w, http.StatusRequestEntityTooLarge, probTooLarge,
			fmt.Sprintf("the body is %d bytes; a vote takes at most %d", r.ContentLength, maxBodyBytes), 0)
		return
	}
	buf := bodyBufs.Get().(*[maxBodyBytes + 1]byte)
	defer bodyBufs.Put(buf)
	body, err := readBody(w, r, buf[:])
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeProblem(w, http.StatusRequestEntityTooLarge, probTooLarge,
				fmt.Sprintf("the body is over %d bytes, the most a vote takes", maxBodyBytes), 0)
			return
		}
		writeProblem(w, http.StatusBadRequest, probBadRequest, "the body could not be read: "+err.Error(), 0)
		return
	}
	// The plain form is parsed in place: the poll and candidate ids are
	// looked up as the body's bytes, and only the event id becomes a
	// string.
	v, fast := parseVoteRaw(body)
	var eventID string
	if fast {
		eventID = string(v.eventID)
	} else {
		tv, err := parseVoteTokens(body)
		if err != nil {
			writeProblem(w, http.StatusBadRequest, probBadRequest, err.Error(), 0)
			return
		}
		eventID = tv.EventID
		v = rawVote{pollID: []byte(tv.PollID), candidateID: []byte(tv.CandidateID)}
	}

	poll, err := s.catalog.lookup(r.Context(), v.pollID, deadline)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		writeProblem(w, http.StatusNotFound, probUnknownPoll,
			fmt.Sprintf("there is no poll %q: check the poll_id", v.pollID), 0)
		return
	case err != nil:
		s.failed(r, "poll lookup failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the poll could not be looked up because the database did not answer: retry after the Retry-After delay", time.Second)
		return
	}
	if !poll.mayVote(p.ID) {
		writeProblem(w, http.StatusForbidden, probNotEligible,
			fmt.Sprintf("poll %q takes votes only from its list of eligible principals, and yours is not on it", poll.poll.ID), 0)
		return
	}
	if !poll.poll.OpenAt(receivedAt) {
		detail := fmt.Sprintf("poll %q opens at %s: vote after that", poll.poll.ID, poll.poll.OpensAt.UTC().Format(time.RFC3339))
		if closes := poll.poll.ClosesAt; closes != nil && !receivedAt.Before(*closes) {
			detail = fmt.Sprintf("poll %q closed at %s and takes no more votes", poll.poll.ID, closes.UTC().Format(time.RFC3339))
		}
		writeProblem(w, http.StatusUnprocessableEntity, probPollClosed, detail, 0)
		return
	}
	choice := poll.choice(v.candidateID)
	if choice == nil {
		writeProblem(w, http.StatusUnprocessableEntity, probInvalidChoice,
			fmt.Sprintf("%q is not a choice of poll %q: pick one of its choices", v.candidateID, poll.poll.ID), 0)
		return
	}

	start := time.Now()
	res, err := s.enqueue(r.Context(), p, eventID, poll, choice, receivedAt, deadline)
	out := res.outcome
	if err != nil {
		out = outRedisError
		if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
			out = outBreakerOpen
		}
	}
	s.metrics.outcome(out).Observe(time.Since(start).Seconds())

	switch out {
	case outAccepted, outReplay:
		if out == outReplay {
			s.metrics.replays.Inc()
		}
		writeAccepted(w, eventID)
	case outConflict:
		writeProblem(w, http.StatusConflict, probKeyReused,
			fmt.Sprintf("event id %q was already used with another poll or candidate: use a new event id for a new vote", eventID), 0)
	case outLimited:
		s.metrics.rateLimited.Inc()
		writeProblem(w, http.StatusTooManyRequests, probRateLimited,
			fmt.Sprintf("your principal may enqueue %g votes per second with bursts of %d: retry after the Retry-After delay", s.cfg.Rate, s.cfg.Burst), res.wait)
	case outBacklog:
		s.metrics.backlogRefusals.Inc()
		writeProblem(w, http.StatusServiceUnavailable, probBacklog,
			"the queue of votes waiting to be counted is full: retry after the Retry-After delay", s.cfg.BacklogRetryAfter)
	case outUnconfirmed:
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			fmt.Sprintf("the vote was written but only %d of %d Redis replicas confirmed it in time: retry the same request (same event_id) after the Retry-After delay", res.replicas, s.cfg.WaitReplicas), time.Second)
	case outBreakerOpen:
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the queue (Redis) is failing and intake is not trying it for now: retry after the Retry-After delay", s.cfg.BreakerOpenFor)
	default:
		s.failed(r, "enqueue failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the queue (Redis) did not answer; the vote may or may not be queued: retry the same request (same event_id) after the Retry-After delay", time.Second)
	}
}

// bodyBufs recycles the buffers vote bodies are read into. parseVote
// copies what it keeps, so a buffer goes back once the vote is parsed.
var bodyBufs = sync.Pool{New: func() any { return new([maxBodyBytes + 1]byte) }}

// readBody reads the body of r into buf, which has room for one byte over
// maxBodyBytes. A body of a known length was already checked against
// maxBodyBytes, and net/http reads no further than that length; any other
// is read through http.MaxBytesReader, whose error says it was too large.
func readBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	rd := r.Body
	if r.ContentLength < 0 {
		rd = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	}
	n := 0
	for n < len(buf) {
		m, err := rd.Read(buf[n:])
		n += m
		if errors.Is(err, io.EOF) {
			return buf[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, &http.MaxBytesError{Limit: maxBodyBytes}
}

// isJSON reports whether a Content-Type is application/json, with any
// parameters.
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// eventStatus is the answer of GET /v1/votes/{event_id}.
type eventStatus struct {
	EventID     string `json:"event_id"`
	PollID      string `json:"poll_id"`
	CandidateID string `json:"candidate_id"`
	Status      string `json:"status"`
	Reason      string `json:"reason,omitempty"`
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	p, ok := s.principal(w, r)
	if !ok {
		return
	}
	id := r.PathValue("event_id")
	if !vote.ValidID(id) {
		writeProblem(w, http.StatusBadRequest, probBadID,
			fmt.Sprintf("event id %s is invalid: event ids are "+vote.IDRule, describeID(id)), 0)
		return
	}
	notFound := func() {
		writeProblem(w, http.StatusNotFound, probNotFound,
			fmt.Sprintf("your principal has no event %q: check the id, or send the vote again (the same event_id is safe to resend)", id), 0)
	}

	pgCtx, cancel := context.WithTimeout(r.Context(), s.cfg.PostgresTimeout)
	rec, err := s.store.Event(pgCtx, p.ID, id)
	cancel()
	switch {
	case err == nil:
		st := eventStatus{EventID: id, PollID: rec.PollID, CandidateID: rec.CandidateID, Status: string(rec.Status)}
		if rec.Status == ledger.StatusRejected {
			st.Reason = string(rec.Reason)
		}
		writeJSON(w, http.StatusOK, st)
		return
	case !errors.Is(err, ledger.ErrNotFound):
		s.failed(r, "event lookup failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the ledger did not answer: retry after the Retry-After delay", time.Second)
		return
	}

	var poll, cand string
	_, err = s.breaker.Execute(func() (any, error) {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RedisTimeout)
		defer cancel()
		var err error
		poll, cand, err = s.pendingRecord(ctx, s.keys.Idempotency(p.ID, id))
		return nil, err
	})
	if err != nil {
		s.failed(r, "pending lookup failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the queue (Redis) did not answer: retry after the Retry-After delay", time.Second)
		return
	}
	if poll == "" {
		notFound()
		return
	}
	writeJSON(w, http.StatusOK, eventStatus{EventID: id, PollID: poll, CandidateID: cand, Status: string(ledger.StatusPending)})
}

// pendingRecord reads the poll and candidate of an idempotency record (see
// enqueueSrc), or "" when there is none. A record of the previous version
// is a hash.
func (s *Server) pendingRecord(ctx context.Context, key string) (poll, cand string, err error) {
	rec, err := s.rdb.Get(ctx, key).Result()
	switch {
	case err == nil:
		poll, cand, _ = strings.Cut(rec, " ")
		return poll, cand, nil
	case errors.Is(err, redis.Nil):
		return "", "", nil
	case !redis.HasErrorPrefix(err, "WRONGTYPE"):
		return "", "", err
	}
	fields, err := s.rdb.HMGet(ctx, key, "poll", "candidate").Result()
	if err != nil {
		return "", "", err
	}
	poll, _ = fields[0].(string)
	cand, _ = fields[1].(string)
	return poll, cand, nil
}

func (s *Server) handleResults(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.principal(w, r); !ok {
		return
	}
	id := r.PathValue("poll_id")
	if !vote.ValidID(id) {
		writeProblem(w, http.StatusBadRequest, probBadID,
			fmt.Sprintf("poll id %s is invalid: poll ids are "+vote.IDRule, describeID(id)), 0)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PostgresTimeout)
	defer cancel()
	res, err := s.store.Results(ctx, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		writeProblem(w, http.StatusNotFound, probUnknownPoll, fmt.Sprintf("there is no poll %q: check the poll id", id), 0)
	case err != nil:
		s.failed(r, "results lookup failed", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the ledger did not answer: retry after the Retry-After delay", time.Second)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readiness is the answer of /readyz.
type readiness struct {
	Status string            `json:"status"` // ready or not ready
	Checks map[string]string `json:"checks"` // "ok" or what is wrong
	Down   []string          `json:"down,omitempty"`
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	var mu sync.Mutex
	rd := readiness{Status: "ready", Checks: map[string]string{}}
	set := func(name string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			rd.Checks[name] = "ok"
			return
		}
		rd.Checks[name] = err.Error()
		rd.Down = append(rd.Down, name)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PostgresTimeout)
		defer cancel()
		set("postgres", s.store.Ping(ctx))
	})
	wg.Go(func() {
		// Through the breaker: once it lets a trial through, a ping that
		// succeeds closes it, so an instance that gets no votes while it
		// is not ready still becomes ready again.
		_, err := s.breaker.Execute(func() (any, error) {
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RedisTimeout)
			defer cancel()
			return nil, s.rdb.Ping(ctx).Err()
		})
		if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
			err = errors.New("not tried: the circuit breaker is open")
		}
		set("redis", err)
	})
	wg.Wait()
	if st := s.breaker.State(); st != gobreaker.StateClosed {
		set("redis_breaker", fmt.Errorf("%s: votes are refused until a trial request succeeds", st))
	} else {
		set("redis_breaker", nil)
	}
	if len(rd.Down) > 0 {
		slices.Sort(rd.Down)
		rd.Status = "not ready"
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, rd)
		return
	}
	writeJSON(w, http.StatusOK, rd)
}
