package client_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"tally/client"
)

// BenchmarkVote is the cost of one vote through Client against a bare
// net/http request of the same vote (the baseline: what tally loadtest
// sent before it used the client), both to a server that answers each
// 202 as intake does, so that the difference is the client's own work.
func BenchmarkVote(b *testing.B) {
	accepted := []byte(`{"event_id":"e1","status":"pending","status_url":"/v1/votes/e1"}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Location", "/v1/votes/e1")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(accepted)
	}))
	b.Cleanup(srv.Close)
	hc := srv.Client()
	a := "a"
	v := client.Vote{EventId: "e1", PollId: "lunch", CandidateId: &a}

	b.Run("baseline=net/http", func(b *testing.B) {
		for b.Loop() {
			body, _ := json.Marshal(v)
			req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, srv.URL+"/v1/votes", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer token")
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var acc client.Accepted
			if resp.StatusCode != http.StatusAccepted || json.Unmarshal(raw, &acc) != nil {
				b.Fatalf("%d %s", resp.StatusCode, raw)
			}
		}
	})
	b.Run("client", func(b *testing.B) {
		c, err := client.New(client.Config{BaseURL: srv.URL, Token: "token", HTTPClient: hc, MaxAttempts: 1})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := c.As("token").Vote(b.Context(), v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
