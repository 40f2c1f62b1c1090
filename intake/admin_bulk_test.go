package intake_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tally/intake"
	"tally/ledger"
)

// TestAdminBulkPrincipals adds the most principals one request takes:
// each gets a distinct id and token, in an answer no cache keeps, and
// every token votes. One name more is refused, naming "names", and adds
// nobody.
func TestAdminBulkPrincipals(t *testing.T) {
	t.Parallel()
	// The test is of the bound and the tokens, not of latency: 10,000
	// principals added, their tokens signed and written took 9 s and
	// more under load 19 (the client's 10 s ran out awaiting the answer),
	// and each vote's Redis round trip can pass its 1 s default there.
	b := setup(t, func(c *config) {
		c.RequestTimeout, c.RedisTimeout, c.WriteTimeout = time.Minute, 30*time.Second, time.Minute
	})
	b.client.Timeout = 2 * time.Minute
	_, admin := b.admin(t, "app")
	names := make([]string, intake.MaxPrincipalsPerRequest+1)
	for i := range names {
		names[i] = fmt.Sprintf("bulk-%05d", i)
	}
	before := principalCount(t, b)
	r := b.adminDo(t, http.MethodPost, "/v1/principals", admin, namesBody(t, names))
	if r.code != http.StatusBadRequest || r.str("type") != "urn:tally:problem:invalid-request" || !strings.Contains(r.str("detail"), `"names"`) {
		t.Fatalf("%d names: %d %.300s, want 400 invalid-request naming \"names\"", len(names), r.code, r.raw)
	}
	if n := principalCount(t, b); n != before {
		t.Fatalf("%d principals after the refused add, want %d", n, before)
	}

	names = names[:intake.MaxPrincipalsPerRequest]
	r = b.adminDo(t, http.MethodPost, "/v1/principals", admin, namesBody(t, names))
	if r.code != http.StatusCreated || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("%d names: %d, Cache-Control %q, want 201 with no-store: %.300s", len(names), r.code, r.header.Get("Cache-Control"), r.raw)
	}
	var added struct {
		Principals []struct {
			ID    string `json:"principal_id"`
			Name  string `json:"name"`
			Role  string `json:"role"`
			Token string `json:"token"`
		} `json:"principals"`
		ExpiresAt *time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(r.raw), &added); err != nil {
		t.Fatal(err)
	}
	if len(added.Principals) != len(names) || added.ExpiresAt != nil {
		t.Fatalf("201 with %d principals, expires_at %v; want %d that never expire", len(added.Principals), added.ExpiresAt, len(names))
	}
	ids, tokens := map[string]bool{}, map[string]bool{}
	for i, p := range added.Principals {
		if p.Name != names[i] || p.Role != ledger.RoleVoter || p.ID == "" || p.Token == "" || ids[p.ID] || tokens[p.Token] {
			t.Fatalf("principal %d: %+v; want %s, a voter, with an id and a token of its own", i, p, names[i])
		}
		ids[p.ID], tokens[p.Token] = true, true
	}
	if n := principalCount(t, b); n != before+len(names) {
		t.Fatalf("%d principals after the add, want %d", n, before+len(names))
	}

	// Every token votes once, 8 at a time; the first refusal stops them.
	load := sampled(t, b.client)
	var (
		next   atomic.Int64
		failed atomic.Pointer[string]
		wg     sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for failed.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(added.Principals) {
					return
				}
				p := added.Principals[i]
				req := b.request(t, http.MethodPost, "/v1/votes", p.Token, "application/json", voteBody("bulk", "p1", "a"))
				if r := sendWith(t, load, req); r.code != http.StatusAccepted {
					msg := fmt.Sprintf("the vote of principal %d (%s): %d %s, want 202", i, p.ID, r.code, r.raw)
					failed.CompareAndSwap(nil, &msg)
				}
			}
		})
	}
	wg.Wait()
	if msg := failed.Load(); msg != nil {
		t.Fatal(*msg)
	}
	if n := b.xlen(t); n != int64(len(names)) {
		t.Fatalf("the stream holds %d entries, want %d", n, len(names))
	}
}

// namesBody is the body of POST /v1/principals adding names.
func namesBody(t *testing.T, names []string) string {
	t.Helper()
	body, err := json.Marshal(map[string][]string{"names": names})
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
