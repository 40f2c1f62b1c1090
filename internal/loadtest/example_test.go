package loadtest_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/credential"
	"tally/internal/loadtest"
	"tally/ledger"
	"tally/stream"
)

// A fault test runs the loadtest against the intakes it started, and
// fails on any broken invariant.
func ExampleRun() {
	ctx := context.Background()
	var (
		store *ledger.Store  // on the test's database
		rdb   *redis.Client  // the Redis intake and projector use
		keys  stream.Keys    // their --stream-prefix and --shards
		key   credential.Key // a --credential-key every intake takes
	)
	rep, err := loadtest.Run(ctx, loadtest.Config{
		Targets:             []string{"http://127.0.0.1:18080", "http://127.0.0.1:18081"},
		Votes:               20_000,
		Principals:          2000,
		RetryShare:          0.1,
		KeyReuseShare:       0.05,
		SecondResponseShare: 0.1,
		AllowReorder:        true, // projectors are killed: a claim may reorder a principal's responses
		DrainTimeout:        2 * time.Minute,
	}, loadtest.Deps{Store: store, Queue: loadtest.RedisQueue(rdb, keys), Key: &key})
	if err != nil {
		fmt.Println("loadtest:", err)
		return
	}
	if !rep.Passed() {
		fmt.Println("lost", rep.Lost, "counted twice", rep.CountedTwice)
		fmt.Println(strings.Join(rep.Failures(), "\n"))
	}
}

// The steps of a run, for a test that injects a fault while the votes are
// sent and reads the progress meanwhile.
func ExampleSession() {
	ctx := context.Background()
	var deps loadtest.Deps // the ledger store, the queue and the key, as for Run
	s, err := loadtest.New(loadtest.Config{Targets: []string{"http://127.0.0.1:18080"}, Duration: 30 * time.Second, Rate: 2000}, deps)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Setup(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	go func() {
		for i := 0; i < 300 && s.Progress().Accepted < 10_000; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		// kill -9 a projector here
	}()
	if err := s.Send(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Drain(ctx); err != nil {
		fmt.Println(err)
		return
	}
	rep, err := s.Verify(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rep.Passed())
}
