// Command syncserver is the baseline of the burst measurement (bench row
// BS): the seed's synchronous design, a net/http server that counts each
// vote before it answers. For every POST /v1/votes it looks the bearer
// token up by its SHA-256 in its own table, sync_tokens (tally stores no
// token), then runs INSERT ... ON
// CONFLICT DO NOTHING into poll_events and, when that inserted the row,
// the upsert of the tally in poll_results, in one transaction, and answers
// 200 once that committed. It checks nothing else (no catalog, no rate
// limit, no log). Run it against a migrated tally database with the
// sync_tokens table the bench makes (burst_baselines.go syncPrincipals).
//
//	go -C bench run ./syncserver -listen 127.0.0.1:8092 -database-url URL
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"tally/vote"
)

// lookupSQL finds the principal of a token hash.
const lookupSQL = `SELECT principal_id FROM sync_tokens WHERE token_sha256 = $1 AND revoked_at IS NULL`

// insertSQL appends the vote; a second vote of the principal, or a retry,
// conflicts and inserts nothing.
const insertSQL = `INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`

// upsertSQL counts the vote.
const upsertSQL = `INSERT INTO poll_results (poll_id, candidate_id, vote_count) VALUES ($1, $2, 1)
ON CONFLICT (poll_id, candidate_id) DO UPDATE SET vote_count = poll_results.vote_count + 1`

func main() {
	listen := flag.String("listen", "127.0.0.1:8092", "TCP address to serve on")
	dbURL := flag.String("database-url", "", "PostgreSQL URL of a migrated tally database")
	conns := flag.Int("max-conns", 16, "PostgreSQL connections in the pool")
	flag.Parse()
	if *dbURL == "" {
		log.Fatal("syncserver: give -database-url")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := pgxpool.ParseConfig(*dbURL)
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = int32(*conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.Handle("POST /v1/votes", &handler{pool: pool})
	srv := &http.Server{
		Addr:              *listen,
		Handler:           mux,
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// handler counts one vote per request, synchronously.
type handler struct{ pool *pgxpool.Pool }

// voteBody is what POST /v1/votes takes.
type voteBody struct {
	EventID     string `json:"event_id"`
	PollID      string `json:"poll_id"`
	CandidateID string `json:"candidate_id"`
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	receivedAt := time.Now()
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		http.Error(w, "missing bearer token", http.StatusUnauthorized)
		return
	}
	var v voteBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || !vote.ValidID(v.EventID) || !vote.ValidID(v.PollID) || !vote.ValidID(v.CandidateID) {
		http.Error(w, "invalid vote", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	hash := sha256.Sum256([]byte(token))
	var principal string
	if err := h.pool.QueryRow(ctx, lookupSQL, hash[:]).Scan(&principal); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			http.Error(w, "unknown token", http.StatusUnauthorized)
			return
		}
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fp := vote.Fingerprint(v.PollID, v.CandidateID)
	err := pgx.BeginTxFunc(ctx, h.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, insertSQL, v.PollID, v.CandidateID, principal, v.EventID, fp[:], receivedAt)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, upsertSQL, v.PollID, v.CandidateID)
		return err
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"event_id": v.EventID, "status": "recorded"})
}
