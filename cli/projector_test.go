package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tally/internal/testenv"
)

// tally projector --workers N reaches the projector, which drains the
// stream with N workers.
func TestProjectorWorkers(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t, "u1", "u2", "u3")
	log := f.runProjector([]string{"--workers", "3", "--batch-size", "1", "--batch-wait", "10ms",
		"--consumer", "cli-workers", "--database-url", testenv.DaemonLogin(t, f.db), "--redis-url", testenv.RedisURL(),
		"--stream-prefix", f.prefix, "--log-format", "text"},
		func() bool { return f.rdb.XLen(f.ctx, f.keys.Stream(0)).Val() == 0 })
	if res, err := f.store.Results(f.ctx, "lunch"); err != nil || res.Total != 3 {
		t.Fatalf("results %+v %v, want 3 votes; the projector's log:\n%s", res, err, log)
	}
	if !strings.Contains(log, "workers=3") {
		t.Errorf("the projector did not start with 3 workers; its log:\n%s", log)
	}
}

// An out-of-range worker count, from the flag or the environment, is
// refused before anything connects. Not parallel: it sets an environment
// variable.
func TestProjectorWorkersRefused(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"--workers", "0"}, "--workers: 0 is not a value of its own"},
		{"", []string{"--workers", "17"}, "--workers: the workers must be between 1 and 16, got 17"},
		{"-1", nil, "--workers: the workers must be between 1 and 16, got -1"},
	} {
		if tc.env != "" {
			t.Setenv("TALLY_PROJECTOR_WORKERS", tc.env)
		}
		// An unreachable database: the check must come first.
		r := tallyWith(t, append([]string{"projector", "--database-url", "postgres://postgres@127.0.0.1:1/none", "--startup-wait", "0s"}, tc.args...)...)
		if r.code != ExitError || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("projector %v (TALLY_PROJECTOR_WORKERS=%q): %+v, want a refusal of the worker count", tc.args, tc.env, r)
		}
	}
}

// tally projector serves no profiles on --metrics-listen by default, and
// pprof's with --pprof, to a client on the loopback interface.
func TestProjectorPprof(t *testing.T) {
	t.Parallel()
	reg := newRegistry()
	for _, tc := range []struct {
		pprof bool
		path  string
		want  int
	}{
		{false, "/debug/pprof/", http.StatusNotFound},
		{false, "/debug/pprof/heap", http.StatusNotFound},
		{false, "/metrics", http.StatusOK},
		{true, "/debug/pprof/", http.StatusOK},
		{true, "/debug/pprof/heap?debug=1", http.StatusOK},
		{true, "/metrics", http.StatusOK},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.path, nil)
		r.RemoteAddr = "127.0.0.1:40000"
		w := httptest.NewRecorder()
		metricsMux(reg, tc.pprof).ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("--pprof=%v: GET %s answered %d, want %d", tc.pprof, tc.path, w.Code, tc.want)
		}
	}
}

// --pprof without --metrics-listen is refused before anything connects.
func TestProjectorPprofNeedsMetricsListen(t *testing.T) {
	t.Parallel()
	r := tallyWith(t, "projector", "--pprof", "--database-url", "postgres://postgres@127.0.0.1:1/none", "--startup-wait", "0s")
	if r.code != ExitError || !strings.Contains(r.stderr, "--pprof: the profiles are served on --metrics-listen only") {
		t.Errorf("projector --pprof without --metrics-listen: %+v, want a refusal naming --metrics-listen", r)
	}
}
