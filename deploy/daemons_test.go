package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tally/internal/chaos"
	"tally/internal/testenv"
)

// daemons are a `tally intake` and a `tally projector`, run from the
// binary on a fresh database and a stream prefix of their own on the test
// Redis, as an operator runs them, and what their /metrics answered once
// votes went all the way through.
type daemons struct {
	intakeMetrics, projectorMetrics []byte
}

// startDaemons builds the tally binary, starts the daemons and sends the
// votes that make them export every metric vector the dashboard reads:
// one recorded, its replay, a reused key (409) and a second response
// (rejected already_responded by the ledger).
func startDaemons(t *testing.T) daemons {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := tallyBinary(t)
	db := testenv.Postgres(t)
	_, prefix := testenv.Redis(t)
	common := []string{
		"--database-url", db.URL, "--redis-url", testenv.RedisURL(),
		"--stream-prefix", prefix, "--shards", "2", "--log-format", "text",
	}
	tally := tallyRunner(t, ctx, bin, common)
	tally("poll", "create", "lunch", "--title", "Lunch on Friday?", "--choice", "pizza", "--choice", "sushi")
	keyFile := filepath.Join(dir, "credential.key")
	if out, err := exec.CommandContext(ctx, bin, "credential", "key", "generate", "--out", keyFile).CombinedOutput(); err != nil {
		t.Fatalf("tally credential key generate: %v\n%s", err, out)
	}
	token := tally("principal", "add", "alice", "--credential-key", keyFile)

	intakeAddr, adminAddr, projectorAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	// The daemons log in as a role granted tally_daemon, as
	// docs/operations.md has the operator do; the commands above as the
	// owner.
	daemon := []string{"--database-url", testenv.DaemonLogin(t, db), "--redis-url", testenv.RedisURL(),
		"--stream-prefix", prefix, "--shards", "2", "--log-format", "text"}
	projector := &chaos.Process{
		Name: "projector", Path: bin, LogPath: filepath.Join(dir, "projector.log"),
		Args: append([]string{"projector", "--consumer", "deploy-test", "--metrics-listen", projectorAddr,
			"--batch-wait", "10ms", "--stats-interval", "100ms"}, daemon...),
		Health: "http://" + projectorAddr + "/healthz",
	}
	intake := &chaos.Process{
		Name: "intake", Path: bin, LogPath: filepath.Join(dir, "intake.log"),
		Args:   append([]string{"intake", "--listen", intakeAddr, "--admin-listen", adminAddr, "--credential-key", keyFile}, daemon...),
		Health: "http://" + adminAddr + "/healthz",
	}
	for _, p := range []*chaos.Process{projector, intake} {
		t.Cleanup(func() {
			p.Stop(5 * time.Second)
			if t.Failed() {
				t.Logf("--- last lines of the %s's log:\n%s", p.Name, p.LogTail(30))
			}
		})
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}

	c := client{http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		base: "http://" + intakeAddr, token: token}
	for _, v := range []struct {
		eventID, candidate string
		want               int
	}{
		{"e-1", "pizza", http.StatusAccepted},
		{"e-1", "pizza", http.StatusAccepted}, // a replay
		{"e-1", "sushi", http.StatusConflict}, // the key reused
		{"e-2", "sushi", http.StatusAccepted}, // a second response
	} {
		c.vote(ctx, t, v.eventID, v.candidate, v.want)
	}
	c.waitApplied(ctx, t, "e-2", "rejected")
	c.waitApplied(ctx, t, "e-1", "recorded")

	c.get(ctx, t, "http://"+intakeAddr+"/metrics", http.StatusNotFound) // on --admin-listen only
	return daemons{
		intakeMetrics:    c.get(ctx, t, "http://"+adminAddr+"/metrics", http.StatusOK),
		projectorMetrics: c.get(ctx, t, "http://"+projectorAddr+"/metrics", http.StatusOK),
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// client talks to intake as one principal.
type client struct {
	http  *http.Client
	base  string
	token string
}

func (c client) do(ctx context.Context, t *testing.T, method, url string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, b
}

func (c client) get(ctx context.Context, t *testing.T, url string, want int) []byte {
	t.Helper()
	code, body := c.do(ctx, t, http.MethodGet, url, nil)
	if code != want {
		t.Fatalf("GET %s: %d, want %d: %s", url, code, want, body)
	}
	return body
}

func (c client) vote(ctx context.Context, t *testing.T, eventID, candidate string, want int) {
	t.Helper()
	body := fmt.Sprintf(`{"event_id":%q,"poll_id":"lunch","candidate_id":%q}`, eventID, candidate)
	if code, answer := c.do(ctx, t, http.MethodPost, c.base+"/v1/votes", strings.NewReader(body)); code != want {
		t.Fatalf("vote %s: %d, want %d: %s", body, code, want, answer)
	}
}

// waitApplied waits until the projector applied the event with the
// status want.
func (c client) waitApplied(ctx context.Context, t *testing.T, eventID, want string) {
	t.Helper()
	for {
		var st struct {
			Status string `json:"status"`
		}
		body := c.get(ctx, t, c.base+"/v1/votes/"+eventID, http.StatusOK)
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatalf("status of %s: %v: %s", eventID, err, body)
		}
		switch st.Status {
		case want:
			return
		case "pending":
		default:
			t.Fatalf("status of %s: %s, want %s: %s", eventID, st.Status, want, body)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s still pending: %v", eventID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestAgainstRunningDaemons checks the dashboard's and the rules'
// queries against what the daemons export, and has promtool lint their
// /metrics.
func TestAgainstRunningDaemons(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	d := startDaemons(t)
	e := exported{}
	for name, body := range map[string][]byte{"intake": d.intakeMetrics, "projector": d.projectorMetrics} {
		if err := e.parseExposition(bytes.NewReader(body)); err != nil {
			t.Fatalf("the %s's /metrics: %v", name, err)
		}
	}

	t.Run("queries name exported metrics", func(t *testing.T) {
		qs, err := loadDashboard(t).queries()
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, ruleQueries(loadRules(t))...)
		for _, q := range qs {
			if err := e.check(q); err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("a made-up metric is refused", func(t *testing.T) {
		for _, expr := range []string{
			`tally_projector_backlogg`,
			`sum(rate(tally_intake_votes_total[5m]))`,
			`histogram_quantile(0.99, sum by (le) (rate(tally_projector_backlog_bucket[5m])))`,
			`max(tally_projector_backlog) > 0 and max(tally_projector_queue_age_seconds) > 60`,
		} {
			if err := e.check(query{where: "made up", expr: expr}); err == nil {
				t.Errorf("check(%q) = nil, want an error", expr)
			}
		}
	})

	for name, body := range map[string][]byte{"intake": d.intakeMetrics, "projector": d.projectorMetrics} {
		t.Run("promtool check metrics "+name, func(t *testing.T) {
			if out, err := runPromtool(t, bin, bytes.NewReader(body), "check", "metrics"); err != nil {
				t.Errorf("promtool check metrics on the %s's /metrics: %v\n%s", name, err, out)
			}
		})
	}
}

// tallyRunner runs the tally binary bin with its arguments and common
// after them, failing t with its standard error unless it exits 0, and
// returns its standard output trimmed.
func tallyRunner(t *testing.T, ctx context.Context, bin string, common []string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append(args, common...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
}
