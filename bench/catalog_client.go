package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// This file owns what the catalog measurement (catalog.go) says to an
// intake over HTTP: an admin's writes (polls created one by one or in
// bulk, closings), a voter's votes, /readyz until the catalog is loaded,
// and the resident memory of the process.

// catalogClient talks to the intakes of one catalog measurement as the
// admin and as the voters its tokens name. It counts every admin write
// answered 503 (the aim is none while PostgreSQL answers).
type catalogClient struct {
	http   *http.Client
	admin  string   // the admin's Authorization header
	voters []string // the voters' Authorization headers
	next   atomic.Int64
	writes atomic.Int64 // admin writes sent
	busy   atomic.Int64 // admin writes answered 503
}

func newCatalogClient(admin string, voters []string) *catalogClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &catalogClient{http: &http.Client{Transport: tr, Timeout: 60 * time.Second}, admin: admin, voters: voters}
}

// post sends body to url with the Authorization header auth and returns
// the status and the answer (at most 1 MiB of it): a vote.
func (c *catalogClient) post(ctx context.Context, url, auth string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", auth)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out, err
}

// adminWrite posts an admin's body to path at addr, counts it, and fails
// unless the answer is one of want. An answer 503 is counted and sent
// again after its Retry-After, as a client would, at most 5 times; the
// write may have been made all the same, so a retry's 200 (the poll
// exists as asked, or is closed) is taken too.
func (c *catalogClient) adminWrite(ctx context.Context, addr, path string, body []byte, want ...int) ([]byte, error) {
	for try := 0; ; try++ {
		c.writes.Add(1)
		code, out, retryAfter, err := c.postAdmin(ctx, "http://"+addr+path, body)
		if err != nil {
			return nil, fmt.Errorf("POST %s: %w", path, err)
		}
		if slices.Contains(want, code) || try > 0 && code == http.StatusOK {
			return out, nil
		}
		if code != http.StatusServiceUnavailable || try == 4 {
			return nil, fmt.Errorf("POST %s answered %d, want %v: %.300s", path, code, want, out)
		}
		c.busy.Add(1)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(retryAfter):
		}
	}
}

// postAdmin is post as the admin, with the answer's Retry-After (1s when
// it has none).
func (c *catalogClient) postAdmin(ctx context.Context, url string, body []byte) (int, []byte, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Authorization", c.admin)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	retry := time.Second
	if n, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && n > 0 {
		retry = time.Duration(n) * time.Second
	}
	return resp.StatusCode, out, retry, err
}

// catalogPoll is the body of POST /v1/polls for poll id: 2 or 3 choices,
// and eligible, when not empty, as its list.
func catalogPoll(id string, n int, eligible []string) map[string]any {
	p := map[string]any{"poll_id": id, "title": "catalog poll " + id, "choices": []string{"a", "b", "c"}[:2+n%2]}
	if len(eligible) > 0 {
		p["eligible"] = eligible
	}
	return p
}

// createPoll creates poll id at addr alone (201).
func (c *catalogClient) createPoll(ctx context.Context, addr, id string) error {
	body, _ := json.Marshal(catalogPoll(id, len(id), nil))
	_, err := c.adminWrite(ctx, addr, "/v1/polls", body, http.StatusCreated)
	return err
}

// createPolls creates the polls ids at addr in one bulk request; each
// must be answered 201.
func (c *catalogClient) createPolls(ctx context.Context, addr string, ids []string) error {
	polls := make([]map[string]any, len(ids))
	for i, id := range ids {
		polls[i] = catalogPoll(id, i, nil)
	}
	body, _ := json.Marshal(polls)
	out, err := c.adminWrite(ctx, addr, "/v1/polls", body, http.StatusOK)
	if err != nil {
		return err
	}
	var ans struct {
		Polls []struct {
			PollID string `json:"poll_id"`
			Status int    `json:"status"`
			Detail string `json:"detail"`
		} `json:"polls"`
	}
	if err := json.Unmarshal(out, &ans); err != nil {
		return fmt.Errorf("bulk create's answer: %w", err)
	}
	if len(ans.Polls) != len(ids) {
		return fmt.Errorf("bulk create of %d polls answered %d", len(ids), len(ans.Polls))
	}
	for _, p := range ans.Polls {
		if p.Status != http.StatusCreated {
			return fmt.Errorf("bulk create: poll %s answered %d: %s", p.PollID, p.Status, p.Detail)
		}
	}
	return nil
}

// closePoll closes poll id now at addr.
func (c *catalogClient) closePoll(ctx context.Context, addr, id string) error {
	_, err := c.adminWrite(ctx, addr, "/v1/polls/"+id+"/close", nil, http.StatusOK)
	return err
}

// vote sends one vote for choice a of poll at addr, from the next voter,
// with a new event id, and returns the status.
func (c *catalogClient) vote(ctx context.Context, addr, poll string) (int, error) {
	n := c.next.Add(1)
	body := []byte(`{"event_id":"c` + strconv.FormatInt(n, 10) + `","poll_id":"` + poll + `","candidate_id":"a"}`)
	code, _, err := c.post(ctx, "http://"+addr+"/v1/votes", c.voters[int(n)%len(c.voters)], body)
	return code, err
}

// waitReady asks addr's /readyz every 20ms until it answers 200 with its
// catalog loaded, for at most limit, and stops early when p exits.
func waitReady(ctx context.Context, p *proc, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("intake on %s exited before it was ready: %v", addr, p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if readyCatalog(ctx, addr) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("intake on %s was not ready with its catalog loaded within %s", addr, limit)
		}
	}
}

// readyCatalog reports whether addr's /readyz answers 200 with the
// catalog check ok.
func readyCatalog(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body struct {
		Checks map[string]string `json:"checks"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&body) == nil && body.Checks["catalog"] == "ok"
}

// rssMB is the process's resident set size now (VmRSS), in MB (10^6
// bytes).
func (p *proc) rssMB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return n * 1024 / 1e6
		}
	}
	return 0
}

// catalogLoads is tally_intake_catalog_loads_total of the intake on addr:
// its whole loads of the catalog (one at start, one more each time it
// fell behind the trimmed change log); -1 when it does not answer.
func catalogLoads(ctx context.Context, addr string) int64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	n, err := metricValue(resp.Body, "tally_intake_catalog_loads_total")
	if err != nil {
		return -1
	}
	return n
}
