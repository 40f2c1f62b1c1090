package intake_test

import (
	"context"
	"log/slog"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tally/intake"
	"tally/ledger"
	"tally/stream"
)

// Wiring an intake: a ledger store on PostgreSQL, a Redis client, the
// stream keys the projector also uses, a logger and a registry. Run serves
// until the context is cancelled, then drains.
func ExampleServer_Run() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/tally")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	keys, err := stream.NewKeys("tally", 1)
	if err != nil {
		panic(err)
	}

	srv, err := intake.New(intake.Config{Listen: "127.0.0.1:8080", Rate: 5, Burst: 10},
		store, rdb, keys, slog.Default(), prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	if err := srv.Run(ctx); err != nil {
		panic(err)
	}
}
