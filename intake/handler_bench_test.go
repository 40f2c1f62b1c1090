package intake_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// BenchmarkHandler measures the vote handler alone, without a network
// client: its time per vote includes one Redis round trip, its allocations
// are intake's own.
func BenchmarkHandler(b *testing.B) {
	db := testenv.Postgres(b)
	rdb, prefix := testenv.Redis(b)
	store, _ := ledger.New(db.Pool, ledger.Config{})
	keys, _ := stream.NewKeys(prefix, 1)
	srv, err := intake.New(intake.Config{Rate: 1e6, Burst: 1_000_000}, store, rdb, keys, testLogger(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	_, token, _ := store.AddPrincipal(ctx, "voter")
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "p1", Title: "t", Choices: []string{"a"}}); err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req := httptest.NewRequest(http.MethodPost, "/v1/votes", bytes.NewReader(voteBody(fmt.Sprintf("h%d", i), "p1", "a")))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusAccepted {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
