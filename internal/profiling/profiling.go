// Package profiling serves the Go runtime's profiles (net/http/pprof) on a
// daemon's operator listener, to clients on the loopback interface only:
// tally intake's --admin-listen and tally projector's --metrics-listen,
// each behind its --pprof flag, off by default.
//
// A CPU profile or an execution trace costs the daemon CPU while it runs,
// and the profiles name the code's functions; so they are served to an
// operator on the host (or through an SSH tunnel), never to whoever can
// reach the listener. The command line (pprof's cmdline) is not served:
// it may hold a database URL with its password.
package profiling

import (
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
)

// Prefix is the path every route of Register starts with.
const Prefix = "/debug/pprof/"

// Register adds the profiles' routes to mux under Prefix: the index, the
// CPU profile (?seconds=N, 30 by default), the execution trace, the
// symbol lookup and each named profile (heap, allocs, goroutine, block,
// mutex, threadcreate). A request from an address that is not a loopback
// one gets 403. net/http/pprof lengthens a profile's write deadline by
// its duration, so the listener's write timeout does not cut it short.
func Register(mux *http.ServeMux) {
	mux.Handle(Prefix, loopbackOnly(http.HandlerFunc(pprof.Index)))
	mux.Handle(Prefix+"profile", loopbackOnly(http.HandlerFunc(pprof.Profile)))
	mux.Handle(Prefix+"trace", loopbackOnly(http.HandlerFunc(pprof.Trace)))
	mux.Handle(Prefix+"symbol", loopbackOnly(http.HandlerFunc(pprof.Symbol)))
}

// loopbackOnly answers 403 to a client whose address is not a loopback
// one.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Loopback(r.RemoteAddr) {
			http.Error(w, "profiles are served to clients on the loopback interface only", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Loopback reports whether addr, a request's RemoteAddr (host:port), is a
// loopback address.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
