package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWrkBurst runs wrk with the burst's script against a handler that
// records each body: every vote arrives exactly once, with its own
// Authorization header, and an answer other than the one wanted fails
// the run. It is skipped where wrk is not installed.
func TestWrkBurst(t *testing.T) {
	bin, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("wrk is not installed")
	}
	const n = 500
	var (
		mu   sync.Mutex
		seen = map[string]string{}
		dup  int
	)
	refuse := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if _, ok := seen[string(b)]; ok {
			dup++
		}
		seen[string(b)] = r.Header.Get("Authorization")
		refused := refuse != "" && string(b) == refuse
		mu.Unlock()
		if refused {
			w.WriteHeader(http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	bodies, auths := make([][]byte, n), make([]string, n)
	for i := range n {
		bodies[i] = fmt.Appendf(nil, `{"event_id":"b-%d"}`, i)
		auths[i] = fmt.Sprintf("Bearer t%d", i)
	}
	e := &env{wrk: bin, tmp: t.TempDir()}
	ctx := context.Background()

	var r burstRun
	t0 := time.Now()
	if _, err := e.wrkBurst(ctx, addr, bodies, auths, http.StatusAccepted, 20*time.Second, &r); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 10*time.Second {
		t.Errorf("the burst took %s: wrk was not interrupted once its threads were done", took)
	}
	if len(seen) != n || dup != 0 {
		t.Errorf("%d distinct votes and %d sent again, want %d and 0", len(seen), dup, n)
	}
	for i := range n {
		if got := seen[string(bodies[i])]; got != auths[i] {
			t.Fatalf("vote %d came with Authorization %q, want %q", i, got, auths[i])
		}
	}
	if r.answered <= 0 || r.clientCPU <= 0 || r.p99 < r.p50 {
		t.Errorf("answered in %s, client CPU %gs, p50 %s, p99 %s", r.answered, r.clientCPU, r.p50, r.p99)
	}

	mu.Lock()
	refuse = string(bodies[7])
	clear(seen)
	mu.Unlock()
	if _, err := e.wrkBurst(ctx, addr, bodies, auths, http.StatusAccepted, 20*time.Second, &burstRun{}); err == nil {
		t.Error("a vote answered 409 did not fail the burst")
	}
}
