package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tally/ledger"
)

// This file owns what every request goes through before and after its
// handler: the routes, the path's spelling (canonical), the request's
// framing (framed), the method check (allow), the request deadline, panic
// recovery and metrics (instrument), authentication (principal and its
// RFC 6750 challenges) with the limits of failed authentications and of
// reads (see limits.go), and the log line of a failed request (failed).

// Route templates, also the route label of the metrics.
const (
	routeVotes       = "/v1/votes"
	routeVote        = "/v1/votes/{event_id}"
	routeResults     = "/v1/polls/{poll_id}/results"
	routeCheckpoint  = "/v1/polls/{poll_id}/checkpoint"
	routeConsistency = "/v1/polls/{poll_id}/consistency"
	routeHealth      = "/healthz"
	routeReady       = "/readyz"
	routeMetrics     = "/metrics"
	routeOther       = "other"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(routeVotes, allow(http.MethodPost, s.handleVote))
	mux.Handle(routeVote, allow(http.MethodGet, s.handleStatus))
	mux.Handle(routeResults, allow(http.MethodGet, s.handleResults))
	mux.Handle(routeCheckpoint, allow(http.MethodGet, s.handleCheckpoint))
	mux.Handle(routeConsistency, allow(http.MethodGet, s.handleConsistency))
	mux.Handle(routeOpenAPI, allow(http.MethodGet, handleOpenAPI))
	mux.Handle(routePolls, getOrPost(s.handleListPolls, s.handleCreatePoll))
	mux.Handle(routePoll, allow(http.MethodGet, s.handleGetPoll))
	mux.Handle(routePollClose, allow(http.MethodPost, s.handleClosePoll))
	mux.Handle(routePrincipals, getOrPost(s.handleListPrincipals, s.handleAddPrincipals))
	mux.Handle(routePrincipalRevoke, allow(http.MethodPost, s.handleRevokePrincipal))
	lv := newLive(s)
	mux.Handle(routePage, allow(http.MethodGet, lv.handlePage))
	mux.Handle(routeLive, allow(http.MethodGet, lv.handleStream))
	s.probeRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, probNotFound,
			"no such route: intake serves POST /v1/votes, GET /v1/votes/{event_id}, GET /v1/polls/{poll_id}/results, "+
				"/checkpoint, /consistency and /live, GET /polls/{poll_id}, /healthz, /readyz, /metrics (unless on --admin-listen) and /openapi.json, "+
				"and to admins GET and POST /v1/polls, GET /v1/polls/{poll_id}, POST /v1/polls/{poll_id}/close, "+
				"GET and POST /v1/principals and POST /v1/principals/{principal_id}/revoke", 0)
	})
	return s.instrument(canonical(framed(mux)))
}

// adminRoutes are the routes of the admin listener (ServeAdmin): the
// probes and /metrics.
func (s *Server) adminRoutes() http.Handler {
	mux := http.NewServeMux()
	s.probeRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, probNotFound,
			"no such route: the admin listener serves GET /healthz, /readyz and /metrics; votes and reads go to --listen", 0)
	})
	return s.instrument(canonical(framed(mux)))
}

// probeRoutes adds /healthz, /readyz and /metrics to mux.
func (s *Server) probeRoutes(mux *http.ServeMux) {
	mux.Handle(routeHealth, allow(http.MethodGet, s.handleHealth))
	mux.Handle(routeReady, allow(http.MethodGet, s.handleReady))
	if s.gatherer != nil {
		mux.Handle(routeMetrics, allow(http.MethodGet, promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}).ServeHTTP))
	}
}

// withoutMetrics answers 404 to /metrics, which an admin listener serves
// instead: the metrics say how intake is degraded, which is the
// operator's to read, not every client's.
func withoutMetrics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == routeMetrics {
			writeProblem(w, http.StatusNotFound, probNotFound,
				"no such route here: this intake serves /metrics on its admin listener (--admin-listen)", 0)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// canonical answers 404 to a path not in its one spelling (a doubled or
// trailing slash, a dot segment, no path at all), which the mux would
// answer with an HTML redirect to the cleaned path: an API client should
// learn the route's spelling, not follow redirects (which drop a POST's
// body).
func canonical(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p != routeVotes && (p == "" || p[0] != '/' || path.Clean(p) != p) {
			writeProblem(w, http.StatusNotFound, probNotFound, "the path "+quoteClip(p)+
				" is not spelled as a route of intake (a doubled or trailing slash, or a . or .. segment): "+
				"ask for the route as documented, such as /v1/votes", 0)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// framed closes the connection after answering a request that came with a
// Transfer-Encoding. net/http reads such a body by its chunked coding and
// drops any Content-Length beside it before a handler could see it, so a
// request with both (the shape of request smuggling) cannot be told from
// a plain chunked one; RFC 9112 6.1 asks to close the connection after
// answering it, so that nothing a proxy read differently is served next.
func framed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TransferEncoding != nil {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
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

// getOrPost serves GET (and HEAD) with get, POST with post, and answers
// 405 to any other method.
func getOrPost(get, post http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			get(w, r)
		case http.MethodPost:
			post(w, r)
		default:
			w.Header().Set("Allow", "GET, POST")
			writeProblem(w, http.StatusMethodNotAllowed, probMethod,
				fmt.Sprintf("%s takes GET or POST, not %s", r.URL.Path, r.Method), 0)
		}
	})
}

// statusWriters recycles statusWriters once their request is answered, so
// instrumenting a request allocates no wrapper.
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
// its own: see handleVote; a live stream is not bounded: see live.go.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if r.URL.Path != routeVotes && !isLiveStream(r.URL.Path) {
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

// observe counts a request by route template and status code, and times
// its answer.
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
	if route != routeLive { // a stream's lifetime is no answer time
		rm.duration.Observe(time.Since(start).Seconds())
	}
}

// principal authenticates a read and spends one of its principal's reads
// (Config.ReadRate), or answers 401, 429 or 503 and returns false.
func (s *Server) principal(w http.ResponseWriter, r *http.Request) (*voter, bool) {
	p, ok := s.principalBy(w, r, time.Time{})
	if !ok {
		return nil, false
	}
	if !s.spendRead(w, p) {
		return nil, false
	}
	return p, true
}

// spendRead spends one of p's reads (Config.ReadRate), which admin
// requests share, or answers 429 and returns false.
func (s *Server) spendRead(w http.ResponseWriter, p *voter) bool {
	wait, ok := s.limits.read(p.ID, time.Now())
	if !ok {
		s.metrics.readLimited.Inc()
		writeProblem(w, http.StatusTooManyRequests, probRateLimited, fmt.Sprintf(
			"your principal may make %g reads per second (event status, results and admin requests) with bursts of %d: "+
				"retry after the Retry-After delay (votes have a limit of their own, untouched by reads)",
			s.cfg.ReadRate, s.cfg.ReadBurst), wait)
	}
	return ok
}

// principalBy authenticates the request, or answers 400, 401, 429 or 503
// and returns false. A signed credential is verified in memory
// (credentials.go). A token of the stored kind ("tly_...") the cache holds
// as valid is served at once; any other is looked up in PostgreSQL,
// bounded by deadline too unless it is zero, within the allowance of
// failed authentications of the client's address (Config.AuthFailureRate,
// limits.go startLookup), which only a refused token spends, so that a
// flood of bad tokens from one address gets 429 before it reaches
// PostgreSQL; concurrent requests with the same uncached token share one
// lookup. Either kind is then refused when the revocations intake holds
// name its principal (or key).
func (s *Server) principalBy(w http.ResponseWriter, r *http.Request, deadline time.Time) (*voter, bool) {
	token, ok := bearerToken(w, r)
	if !ok {
		return nil, false
	}
	if !strings.HasPrefix(token, ledger.LegacyTokenPrefix) {
		return s.signedPrincipal(w, r, token)
	}
	v, ok := s.storedPrincipal(w, r, token, deadline)
	if ok && s.refusedRevoked(w, v.ID, "", false) {
		return nil, false
	}
	return v, ok
}

// storedPrincipal authenticates token, one of the form issued before
// signed credentials, by its stored hash, as principalBy says.
func (s *Server) storedPrincipal(w http.ResponseWriter, r *http.Request, token string, deadline time.Time) (*voter, bool) {
	if v := s.auth.known(token, time.Now()); v != nil {
		return v, true
	}
	got, _, _ := s.authFlight.Do(token, func() (any, error) {
		return s.attemptAuth(r, token, deadline), nil
	})
	res := got.(authAttempt)
	switch {
	case res.limited:
		s.metrics.authLimited.Inc()
		writeProblem(w, http.StatusTooManyRequests, probAuthRateLimited,
			"too many requests from your address carried a bearer token that is unknown or revoked: "+
				"retry after the Retry-After delay, with a valid token", res.wait)
		return nil, false
	case errors.Is(res.err, errUnauthenticated):
		unauthorized(w, challengeInvalidToken,
			"the bearer token is unknown or revoked: ask an operator for a valid token")
		return nil, false
	case res.err != nil:
		s.failed(r, "authentication failed: PostgreSQL did not answer", res.err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the token could not be checked because the database did not answer: retry after the Retry-After delay", time.Second)
		return nil, false
	}
	return res.voter, true
}

// authAttempt is the outcome of one attempt to authenticate an uncached
// token.
type authAttempt struct {
	voter   *voter
	limited bool          // the address's budget is spent: nothing was looked up
	wait    time.Duration // when limited, until the next attempt
	err     error
}

// attemptAuth looks token up once the allowance of r's address admits
// it, charging the allowance when the token is refused.
func (s *Server) attemptAuth(r *http.Request, token string, deadline time.Time) (res authAttempt) {
	lookup, wait, err := s.limits.startLookup(r.Context(), r.RemoteAddr, deadline)
	switch {
	case err != nil:
		return authAttempt{err: err}
	case wait > 0:
		return authAttempt{limited: true, wait: wait}
	}
	// Deferred, so that a lookup that panics is not left under way.
	defer func() { lookup.end(errors.Is(res.err, errUnauthenticated)) }()
	v, err := s.auth.authenticate(r.Context(), token, deadline)
	return authAttempt{voter: v, err: err}
}

// The WWW-Authenticate challenges of RFC 6750 3: a bare one when the
// request carried no bearer token, an error code when it carried one that
// is malformed or refused.
const (
	challengeBearer         = "Bearer"
	challengeInvalidRequest = `Bearer error="invalid_request"`
	challengeInvalidToken   = `Bearer error="invalid_token"`
)

// bearerToken returns the token of the request's one Authorization
// header, or answers 400 (more than one header) or 401 and returns false.
func bearerToken(w http.ResponseWriter, r *http.Request) (string, bool) {
	hs := r.Header["Authorization"]
	if len(hs) > 1 {
		w.Header().Set("WWW-Authenticate", challengeInvalidRequest)
		writeProblem(w, http.StatusBadRequest, probAuthorization, fmt.Sprintf(
			"the request has %d Authorization headers: send exactly one, \"Authorization: Bearer TOKEN\"", len(hs)), 0)
		return "", false
	}
	if len(hs) == 0 || hs[0] == "" {
		unauthorized(w, challengeBearer,
			"the request has no Authorization header: send \"Authorization: Bearer TOKEN\" with your principal's token")
		return "", false
	}
	scheme, token, _ := strings.Cut(hs[0], " ")
	token = strings.TrimSpace(token)
	switch {
	case !strings.EqualFold(scheme, "Bearer"):
		unauthorized(w, challengeBearer,
			"the Authorization header is not of the form \"Bearer TOKEN\": send your principal's token that way")
		return "", false
	case token == "":
		unauthorized(w, challengeInvalidRequest,
			"the Authorization header has no token after \"Bearer\": send \"Authorization: Bearer TOKEN\" with your principal's token")
		return "", false
	}
	return token, true
}

// unauthorized answers 401 with challenge as its WWW-Authenticate.
func unauthorized(w http.ResponseWriter, challenge, detail string) {
	writeProblem(challengeWriter{w, challenge}, http.StatusUnauthorized, probUnauthorized, detail, 0)
}

// challengeWriter sets its challenge as the WWW-Authenticate header as the
// status is written, in place of the generic one writeProblem gives every
// 401.
type challengeWriter struct {
	http.ResponseWriter
	challenge string
}

func (c challengeWriter) WriteHeader(code int) {
	c.Header().Set("WWW-Authenticate", c.challenge)
	c.ResponseWriter.WriteHeader(code)
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
