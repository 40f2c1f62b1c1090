package profiling

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8081":        true,
		"127.8.9.10:1":          true,
		"[::1]:8081":            true,
		"[::ffff:127.0.0.1]:80": true,
		"10.0.0.1:8081":         false,
		"[2001:db8::1]:8081":    false,
		"192.0.2.1":             false, // no port
		"":                      false,
		"localhost:8081":        false, // a name, not an address
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestRegisterLoopbackOnly: a client on the loopback interface gets the
// profiles, any other 403, and the command line is not served.
func TestRegisterLoopbackOnly(t *testing.T) {
	mux := http.NewServeMux()
	Register(mux)
	for _, tc := range []struct {
		path, remote string
		want         int
		body         string
	}{
		{"/debug/pprof/", "127.0.0.1:5000", http.StatusOK, "goroutine"},
		{"/debug/pprof/goroutine?debug=1", "[::1]:5000", http.StatusOK, "goroutine profile"},
		{"/debug/pprof/", "192.0.2.1:5000", http.StatusForbidden, "loopback"},
		{"/debug/pprof/profile?seconds=1", "192.0.2.1:5000", http.StatusForbidden, "loopback"},
		{"/debug/pprof/cmdline", "127.0.0.1:5000", http.StatusNotFound, "Unknown profile"},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.path, nil)
		r.RemoteAddr = tc.remote
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.body) {
			t.Errorf("GET %s from %s: %d %.200s, want %d with %q", tc.path, tc.remote, w.Code, w.Body, tc.want, tc.body)
		}
	}
}
