package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/intake"
	"tally/internal/apitest"
	"tally/internal/pause"
	"tally/internal/testenv"
	"tally/ledger"
)

// This file holds the scenario of a PostgreSQL outage as intake's clients
// see it: the loadtest keeps sending while a probe checks, during the
// outage, that intake degrades safely (every principal with a valid
// signed credential, seen before or not, keeps getting 202, results
// answer stale, /readyz reads degraded), and that every vote accepted
// meanwhile is counted once PostgreSQL is back.

// probe is the scenario's own principals, outside the loadtest: voters
// that voted before the outage, and a stranger, whose first vote comes
// during it.
type probe struct {
	url      string
	client   *http.Client
	voters   []ledger.Principal
	tokens   []string // of voters
	stranger string
}

// answer is an HTTP answer with its JSON body decoded.
type answer struct {
	code int
	body map[string]any
	raw  string
}

func (p *probe) do(ctx context.Context, method, path, token, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{code: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a, nil
}

func (p *probe) vote(ctx context.Context, token, eventID, poll string) (answer, error) {
	return p.do(ctx, http.MethodPost, "/v1/votes", token,
		fmt.Sprintf(`{"event_id":%q,"poll_id":%q,"candidate_id":"a"}`, eventID, poll))
}

// expect returns an error naming what when a is not code (and, when
// check is set, check(a) is false).
func expect(what string, a answer, err error, code int, check func(answer) bool) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case a.code != code || (check != nil && !check(a)):
		return fmt.Errorf("%s: %d %s, want %d", what, a.code, a.raw, code)
	}
	return nil
}

// The probe's voters, and its polls: each voter votes on the first before
// the outage, and on each of the others during it.
const (
	probeVoters = 20
	probePolls  = 6
)

func probePoll(i int) string { return "degraded-" + strconv.Itoa(i) }

// newProbe creates the probe's principals and polls.
func newProbe(t *testing.T, c *cluster) *probe {
	t.Helper()
	ctx := context.Background()
	api, err := apitest.Load(intake.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	// Every exchange of the probe is checked against intake's OpenAPI
	// document: what a client sees during the outage is part of the contract.
	p := &probe{url: c.intakeURLs()[0], client: &http.Client{Timeout: 10 * time.Second, Transport: api.Transport(t, nil)}}
	for i := range probeVoters {
		v, token, err := c.signed(ctx, "probe "+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		p.voters, p.tokens = append(p.voters, v), append(p.tokens, token)
	}
	if _, p.stranger, err = c.signed(ctx, "stranger"); err != nil {
		t.Fatal(err)
	}
	for i := range probePolls {
		if err := c.store.CreatePoll(ctx, ledger.Poll{ID: probePoll(i), Title: "probe", Choices: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Intake knows a poll once it heard the NOTIFY of its creation.
	for i := range probePolls {
		testenv.Eventually(t, 10*time.Second, "intake to know poll "+probePoll(i), func() error {
			a, err := p.do(ctx, http.MethodGet, "/v1/polls/"+probePoll(i)+"/results", p.tokens[0], "")
			if err == nil && a.code == http.StatusNotFound {
				err = fmt.Errorf("%+v", a)
			}
			return err
		})
	}
	return p
}

// beforeOutage has intake verify every voter (each votes on the first
// poll) and hold every poll, and returns the first poll's results once
// every vote is counted.
func (p *probe) beforeOutage(ctx context.Context) (answer, error) {
	for i, token := range p.tokens {
		a, err := p.vote(ctx, token, "before", probePoll(0))
		if err := expect(fmt.Sprintf("probe voter %d's vote before the outage", i), a, err, http.StatusAccepted, nil); err != nil {
			return answer{}, err
		}
	}
	for i := 1; i < probePolls; i++ {
		a, err := p.do(ctx, http.MethodGet, "/v1/polls/"+probePoll(i)+"/results", p.tokens[0], "")
		if err := expect("results of a poll of the outage", a, err, http.StatusOK, nil); err != nil {
			return answer{}, err
		}
	}
	var a answer
	var err error
	for range 50 {
		a, err = p.do(ctx, http.MethodGet, "/v1/polls/"+probePoll(0)+"/results", p.tokens[0], "")
		if err == nil && a.body["total"] == float64(probeVoters) {
			return a, nil
		}
		pause.For(ctx, 200*time.Millisecond)
	}
	return a, expect("results before the outage, every probe vote counted", a, err, http.StatusOK, func(answer) bool { return false })
}

// duringOutage checks what intake answers while PostgreSQL is down, and
// returns how many of the probe's votes it accepted.
func (p *probe) duringOutage(ctx context.Context, before answer) (int, error) {
	// /readyz pings PostgreSQL: from its failure on, intake knows that a
	// vote it accepts cannot have been applied (its status is pending).
	// A signed credential's vote asks PostgreSQL nothing, so it would not
	// tell intake.
	a, err := p.do(ctx, http.MethodGet, "/readyz", "", "")
	if err := expect("/readyz once PostgreSQL stopped", a, err, http.StatusOK, func(a answer) bool { return a.body["status"] == "degraded" }); err != nil {
		return 0, err
	}
	accepted := 0
	for i := 1; i < probePolls; i++ {
		for v, token := range p.tokens {
			a, err := p.vote(ctx, token, "during-"+strconv.Itoa(i), probePoll(i))
			if err := expect(fmt.Sprintf("probe voter %d's vote on %s", v, probePoll(i)), a, err, http.StatusAccepted, nil); err != nil {
				return accepted, err
			}
			accepted++
		}
	}
	a, err = p.vote(ctx, p.stranger, "stranger", probePoll(1))
	if err := expect("the first vote of a principal intake never saw", a, err, http.StatusAccepted, nil); err != nil {
		return accepted, err
	}
	a, err = p.do(ctx, http.MethodGet, "/v1/polls/"+probePoll(0)+"/results", p.tokens[0], "")
	if err := expect("results", a, err, http.StatusOK, func(a answer) bool {
		return a.body["stale"] == true && a.body["as_of"] == before.body["as_of"] && a.body["total"] == before.body["total"]
	}); err != nil {
		return accepted, err
	}
	a, err = p.do(ctx, http.MethodGet, "/v1/votes/during-1", p.tokens[0], "")
	if err := expect("the status of a vote accepted during the outage", a, err, http.StatusOK,
		func(a answer) bool { return a.body["status"] == "pending" }); err != nil {
		return accepted, err
	}
	a, err = p.do(ctx, http.MethodGet, "/readyz", "", "")
	return accepted, expect("/readyz", a, err, http.StatusOK, func(a answer) bool {
		checks, _ := a.body["checks"].(map[string]any)
		return a.body["status"] == "degraded" && checks["postgres"] == "unreachable"
	})
}

// recorded counts the probe's votes of the outage the ledger recorded.
func (p *probe) recorded(ctx context.Context, c *cluster) (int, error) {
	n := 0
	for _, v := range p.voters {
		for i := 1; i < probePolls; i++ {
			rec, err := c.store.Event(ctx, v.ID, "during-"+strconv.Itoa(i))
			if err != nil {
				return n, fmt.Errorf("probe voter %s's vote on %s: %w", v.ID, probePoll(i), err)
			}
			if rec.Status == ledger.StatusRecorded {
				n++
			}
		}
	}
	return n, nil
}

// intakeCounter sums the samples of one of intake's counters whose series
// name starts with prefix, from its /metrics.
func (p *probe) intakeCounter(ctx context.Context, prefix string) float64 {
	a, err := p.do(ctx, http.MethodGet, "/metrics", "", "")
	if err != nil {
		return -1
	}
	var sum float64
	for _, line := range strings.Split(a.raw, "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, prefix) {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			sum += v
		}
	}
	return sum
}

// Stop a private PostgreSQL mid-load. The loadtest sends on (its signed
// credentials need no query; its rounds wait for their polls); the probe's
// voters vote on every poll of theirs and must all get 202, as must a
// principal intake never saw, results answer stale, a vote's status
// pending, /readyz degraded. Once PostgreSQL is back the backlog
// drains, the loadtest's verification passes, and every vote of the
// probe's is recorded.
func TestPostgresDownDegraded(t *testing.T) {
	scenario(t)
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 2, privatePostgres: true})
	p := newProbe(t, c)
	outage := 5 * time.Second
	if prof.name == "long" {
		outage = 20 * time.Second
	}
	const accepted = `tally_intake_requests_total{code="202",route="/v1/votes"}`
	var probeAccepted int
	var acceptedDuring float64
	run(t, c, "postgres-down-degraded", outage+6*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		before, err := p.beforeOutage(ctx)
		if err != nil {
			return 0, "", err
		}
		accepted202 := p.intakeCounter(ctx, accepted)
		c.pg.Stop()
		start := time.Now()
		pause.For(ctx, 1500*time.Millisecond) // past --read-cache-ttl, and intake saw PostgreSQL fail
		probeAccepted, err = p.duringOutage(ctx, before)
		pause.For(ctx, time.Until(start.Add(outage)))
		acceptedDuring = p.intakeCounter(ctx, accepted) - accepted202
		ending()
		c.pg.Start()
		return 1, fmt.Sprintf("PostgreSQL stopped for %s", outage), err
	})
	ctx := context.Background()
	if n, err := p.recorded(ctx, c); err != nil || n != probeAccepted || n != probeVoters*(probePolls-1) {
		t.Errorf("%d of the probe's %d votes accepted during the outage are recorded (%v), want all %d", n, probeAccepted, err, probeVoters*(probePolls-1))
	}
	for _, kind := range []string{"stale_results", "pending_from_queue"} {
		n := p.intakeCounter(ctx, `tally_intake_degraded_answers_total{answer="`+kind+`"}`)
		if n < 1 {
			t.Errorf("intake counted %v %s answers, want some", n, kind)
		}
		t.Logf("postgres-down-degraded: intake gave %.0f %s answers", n, kind)
	}
	t.Logf("postgres-down-degraded: intake answered %.0f votes 503 and %.0f 202, %.0f of them (%d the probe's) while PostgreSQL was down",
		p.intakeCounter(ctx, `tally_intake_requests_total{code="503",route="/v1/votes"}`), p.intakeCounter(ctx, accepted), acceptedDuring, probeAccepted)
}
