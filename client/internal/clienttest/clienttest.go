// Package clienttest serves what the tests of the generated clients drive:
// a real intake and projector, in process, on a fresh database and a
// unique Redis prefix, with an admin's and two voters' tokens, and an
// HTTP client that checks every exchange against intake's OpenAPI
// document. The client package's tests use it, and so do those of the
// module client/ogentest, which builds ogen's client.
package clienttest

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/credential"
	"tally/intake"
	"tally/internal/apitest"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/projector"
	"tally/stream"
)

// Intake is a served intake and the principals a test calls it as.
type Intake struct {
	// URL is intake's base URL, http://127.0.0.1:PORT.
	URL string
	// Admin is an admin's token; Voter and Other are two voters'.
	Admin, Voter, Other string
	// HTTP sends requests and fails the test on an exchange that does
	// not match intake's OpenAPI document.
	HTTP *http.Client
}

// Start serves an intake with cfg (its credentials are the fixture's:
// leave them unset; a zero Rate and Burst get 1000) and a projector, both
// stopped when t ends.
func Start(t testing.TB, cfg intake.Config) *Intake {
	t.Helper()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	keys, err := stream.NewKeys(prefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := credential.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keySet, err := credential.NewKeySet(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Credentials, cfg.CredentialKeyIDs, cfg.TokenKey = credential.NewVerifier(keySet), []string{key.ID}, &key
	if cfg.Rate == 0 && cfg.Burst == 0 {
		cfg.Rate, cfg.Burst = 1000, 1000
	}
	log := slog.New(slog.DiscardHandler)
	srv, err := intake.New(cfg, store, rdb, keys, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	proj, err := projector.New(store, rdb, keys, projector.Config{
		Consumer: "client-test", BatchSize: 100, BatchWait: 5 * time.Millisecond,
		MinIdle: time.Hour, BackoffMin: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		StatsInterval: time.Second,
	}, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ctx, ln); err != nil {
			t.Errorf("intake: %v", err)
		}
	})
	wg.Go(func() {
		if err := proj.Run(ctx); err != nil {
			t.Errorf("projector: %v", err)
		}
	})
	api, err := apitest.Load(intake.OpenAPIDocument())
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		testenv.WaitGroup(t, &wg, 20*time.Second, "intake and the projector to stop once their context ended")
	})
	in := &Intake{URL: "http://" + ln.Addr().String(), HTTP: &http.Client{Transport: api.Transport(t, tr), Timeout: 10 * time.Second}}
	in.Admin = issue(t, store, key, "admin", ledger.RoleAdmin)
	in.Voter = issue(t, store, key, "voter", "")
	in.Other = issue(t, store, key, "other", "")
	return in
}

// issue adds a principal of role (ledger.RoleAdmin, or "" for a voter)
// and returns a token of it signed with key.
func issue(t testing.TB, store *ledger.Store, key credential.Key, name, role string) string {
	t.Helper()
	ps, err := store.AddPrincipals(context.Background(), []string{name}, role)
	if err != nil {
		t.Fatal(err)
	}
	var token string
	if role == ledger.RoleAdmin {
		token, err = key.IssueRole(ps[0].ID, credential.RoleAdmin, ps[0].CreatedAt, time.Time{})
	} else {
		token, err = key.Issue(ps[0].ID, ps[0].CreatedAt, time.Time{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return token
}
