// Package testenv gives tests real, isolated servers: a fresh PostgreSQL
// database cloned from a migrated template, a unique Redis key prefix on the
// shared Redis, or a private redis-server, Redis Cluster or Sentinel set the
// test may kill, pause and restart.
//
// The shared servers come from TALLY_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres) and TALLY_TEST_REDIS_URL
// (default redis://127.0.0.1:6379/0). Everything a test creates is removed
// in t.Cleanup.
//
// Files:
//
//   - testenv.go: the shared servers' URLs, unique names, and Main, the
//     TestMain of every package that runs daemons in-process (template
//     dropped, goroutine leaks found);
//   - postgres.go: a fresh migrated database per test, cloned from a
//     template database made once per test binary;
//   - redis.go: a unique key prefix per test on the shared Redis;
//   - pgserver.go: PGServer, a private PostgreSQL a test may crash and
//     start again;
//   - redisserver.go: RedisServer, a private redis-server a test may kill
//     and start again; FreeAddr, a loopback port no earlier call returned;
//   - rediscluster.go: RedisCluster, a private Redis Cluster (masters and
//     replicas on loopback ports of their own) whose nodes a test may pause;
//   - redissentinel.go: RedisSentinel, a private master, replica and
//     sentinels, which a test may fail over;
//   - daemon.go: DaemonLogin, a login granted tally_daemon, which the
//     daemons run as;
//   - logbuffer.go: LogBuffer, log lines collected from any goroutine;
//   - wait.go: WaitGroup and Receive, waits with a deadline that fail
//     the test saying what they waited for.
package testenv
