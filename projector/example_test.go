package projector_test

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tally/ledger"
	"tally/projector"
	"tally/stream"
)

// A projector daemon: the ledger, the streams, and Run until SIGTERM.
// (Compiled, not run: it needs PostgreSQL and Redis.)
func ExampleProjector_Run() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/tally")
	if err != nil {
		log.Error("connect to PostgreSQL", "error", err)
		return
	}
	defer pool.Close()
	store, err := ledger.New(pool, ledger.Config{Logger: log})
	if err != nil {
		log.Error("open the ledger", "error", err)
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	keys, err := stream.NewKeys(stream.DefaultPrefix, 1)
	if err != nil {
		log.Error("stream keys", "error", err)
		return
	}

	p, err := projector.New(store, rdb, keys, projector.Config{BatchSize: 1000}, log, prometheus.NewRegistry())
	if err != nil {
		log.Error("configure the projector", "error", err)
		return
	}
	// Run returns nil after SIGTERM, once the batch in flight committed
	// and was acknowledged.
	if err := p.Run(ctx); err != nil {
		log.Error("projector", "error", err)
	}
}
