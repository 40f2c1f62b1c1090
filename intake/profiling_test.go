package intake_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"tally/intake"
)

// TestAdminListenerPprof: the admin listener serves no profiles by
// default; with Config.Pprof it serves pprof's index and a heap profile
// (to this test, on the loopback interface), but not the command line.
// The data listener never serves them.
func TestAdminListenerPprof(t *testing.T) {
	t.Parallel()
	off := setup(t, func(c *config) { c.AdminListen = "127.0.0.1:0" })
	on := setup(t, func(c *config) { c.AdminListen, c.Pprof = "127.0.0.1:0", true })
	for _, tc := range []struct {
		name, url string
		want      int
		body      string
	}{
		{"default, admin listener", off.adminURL + "/debug/pprof/heap", http.StatusNotFound, "no such route"},
		{"default, data listener", off.url + "/debug/pprof/heap", http.StatusNotFound, "no such route"},
		{"pprof, index", on.adminURL + "/debug/pprof/", http.StatusOK, "goroutine"},
		{"pprof, heap", on.adminURL + "/debug/pprof/heap?debug=1", http.StatusOK, "heap profile"},
		{"pprof, command line", on.adminURL + "/debug/pprof/cmdline", http.StatusNotFound, "Unknown profile"},
		{"pprof, data listener", on.url + "/debug/pprof/heap", http.StatusNotFound, "no such route"},
	} {
		resp, err := http.Get(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || !strings.Contains(string(body), tc.body) {
			t.Errorf("%s: GET %s answered %d %.200s, want %d with %q", tc.name, tc.url, resp.StatusCode, body, tc.want, tc.body)
		}
	}
	// The admin listener's other routes are served as without profiles.
	resp, err := http.Get(on.adminURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz on the admin listener with profiles: %d", resp.StatusCode)
	}
}

// TestPprofNeedsAdminListener: profiles without an admin listener are a
// setting refused, naming the field.
func TestPprofNeedsAdminListener(t *testing.T) {
	t.Parallel()
	err := intake.Config{Pprof: true}.Validate()
	if err == nil || !strings.Contains(err.Error(), "admin listener") {
		t.Fatalf("Validate of Pprof without AdminListen: %v, want a refusal naming the admin listener", err)
	}
}
