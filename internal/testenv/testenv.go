package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// DatabaseURL is the admin URL of the shared PostgreSQL.
func DatabaseURL() string {
	if u := os.Getenv("TALLY_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// RedisURL is the URL of the shared Redis.
func RedisURL() string {
	if u := os.Getenv("TALLY_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// RandomName returns prefix followed by 12 random hex digits.
func RandomName(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// QuietRedis discards what go-redis logs by itself: a test that stops a
// Redis on purpose would otherwise print a line for every refused dial of
// every pool, whether the test passes or not. A test that checks those
// lines sets its own logger.
func QuietRedis() { redis.SetLogger(quietRedis{}) }

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// Main runs the tests of a package, drops the template database and, when
// they passed, fails the run if any goroutine is left behind (goleak): a
// daemon that does not stop when its context ends is a bug. Use it as
// func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }.
//
// It first quiets go-redis's own logger (see QuietRedis).
func Main(m *testing.M, opts ...goleak.Option) int {
	QuietRedis()
	code := m.Run()
	DropTemplate()
	if code != 0 {
		return code
	}
	if err := goleak.Find(opts...); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: goroutines still running after the tests passed: %v\n", err)
		return 1
	}
	return 0
}
