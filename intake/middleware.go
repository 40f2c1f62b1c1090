package intake

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tally/intake/internal/admin"
	"tally/intake/internal/live"
	"tally/intake/internal/problem"
	"tally/internal/profiling"
)

// This file owns what every request goes through before and after its
// handler: the routes, the path's spelling (canonical), the request's
// framing (framed), the method check (allow), the request deadline, panic
// recovery and metrics (instrument), and the log line of a failed request
// (failed). Authentication is request_auth.go's.

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
	ad := newAdmin(s)
	mux.Handle(admin.RoutePolls, getOrPost(ad.ListPolls, ad.CreatePoll))
	mux.Handle(admin.RoutePoll, allow(http.MethodGet, ad.GetPoll))
	mux.Handle(admin.RoutePollClose, allow(http.MethodPost, ad.ClosePoll))
	mux.Handle(admin.RoutePrincipals, getOrPost(ad.ListPrincipals, ad.AddPrincipals))
	mux.Handle(admin.RoutePrincipalRevoke, allow(http.MethodPost, ad.RevokePrincipal))
	lv := newLive(s)
	mux.Handle(live.RoutePage, allow(http.MethodGet, lv.Page))
	mux.Handle(live.RouteStream, allow(http.MethodGet, lv.Stream))
	s.probeRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, probNotFound,
			"no such route: intake serves POST /v1/votes, GET /v1/votes/{event_id}, GET /v1/polls/{poll_id}/results, "+
				"/checkpoint, /consistency and /live, GET /polls/{poll_id}, /healthz, /readyz, /metrics (unless on the admin listener) and /openapi.json, "+
				"GET /v1/polls/{poll_id} (to a voter, a poll it may vote on), "+
				"and to admins GET and POST /v1/polls, POST /v1/polls/{poll_id}/close, "+
				"GET and POST /v1/principals and POST /v1/principals/{principal_id}/revoke", 0)
	})
	return s.instrument(canonical(framed(mux)))
}

// adminRoutes are the routes of the admin listener (ServeAdmin): the
// probes and /metrics, and with Config.Pprof the profiles. A profile is
// served apart from instrument: it runs for its duration, not within
// Config.RequestTimeout, and is no request the metrics should time.
func (s *Server) adminRoutes() http.Handler {
	mux := http.NewServeMux()
	s.probeRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, probNotFound,
			"no such route: the admin listener serves GET /healthz, /readyz and /metrics; votes and reads go to the data listener", 0)
	})
	h := s.instrument(canonical(framed(mux)))
	if !s.cfg.Pprof {
		return h
	}
	profiles := http.NewServeMux()
	profiling.Register(profiles)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, profiling.Prefix) {
			profiles.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
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
				"no such route here: this intake serves /metrics on its admin listener", 0)
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
// its own: see handleVote; a live stream is not bounded: see package live.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if r.URL.Path != routeVotes && !live.IsStream(r.URL.Path) {
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
	if route != live.RouteStream { // a stream's lifetime is no answer time
		rm.duration.Observe(time.Since(start).Seconds())
	}
}

// failed logs an error that made a request fail (problem.Failed).
func (s *Server) failed(r *http.Request, msg string, err error) { problem.Failed(s.log, r, msg, err) }
