// Package chaos is tally's fault suite. It proves, against real processes,
// the claim tally exists for: under crashes, restarts and network faults it
// loses no vote it answered 202 and counts none twice (invariants I1-I4).
//
// # What runs
//
// TestMain builds the tally binary once. Each scenario then starts its own
// world: a private redis-server (appendonly yes, appendfsync always), a
// fresh database on the shared PostgreSQL (or, for the PostgreSQL restart,
// a private PostgreSQL instance), and `tally intake` and `tally projector`
// as child processes in process groups of their own, with their logs in
// the test's temporary directory (printed when the scenario fails). The
// loadtest (package internal/loadtest) sends authorized votes to the
// intakes over HTTP on 127.0.0.1 — exact retries, key reuse and second
// responses among them — while the scenario injects its fault:
//
//   - projector-kill: kill -9 one of two projectors of the consumer group
//     at random moments and restart it; the survivor or the restarted one
//     claims the dead one's pending entries;
//   - intake-kill: kill -9 one of two intakes while requests are in
//     flight and restart it; the client sends an unanswered vote again,
//     with the same key;
//   - redis-restart: kill -9 Redis and start it again on its append-only
//     file;
//   - postgres-restart: stop PostgreSQL in immediate mode (a crash) and
//     start it again;
//   - network: a TCP proxy (toxiproxy, in process) between the projectors
//     and PostgreSQL and another between the intakes and Redis add
//     latency, then cut the link (the proxy disabled, or every connection
//     reset) for a few seconds, then restore it;
//   - backlog-full: both projectors down until every shard holds intake's
//     --max-backlog; intake answers 503 backlog-full and the client sends
//     again after Retry-After;
//   - poison: entries that cannot be applied (undecodable, or a payload
//     that does not match its fingerprint) written among the votes; each
//     must end in the dead-letter stream with its reason, and nothing else
//     may;
//   - postgres-outage: the link between the projectors and PostgreSQL cut
//     for longer than --min-idle, while intake keeps accepting;
//   - postgres-down-degraded: a private PostgreSQL stopped mid-load;
//     meanwhile a probe checks that intake degrades safely (principals
//     with signed credentials get 202, seen before or not, results answer
//     stale, a vote's status pending, /readyz degraded), and afterwards
//     that every probe vote is recorded;
//   - slow-postgres-overlap: latency on that link with a --min-idle shorter
//     than a batch may take, so live projectors claim and apply each
//     other's entries at once, and projectors are killed meanwhile;
//   - postgres-failover: a private primary with a synchronous streaming
//     standby; the primary stops at once and the standby is promoted; the
//     daemons' multi-host URL (target_session_attrs=read-write) finds it;
//   - redis-cluster-failover and redis-sentinel-failover, each with and
//     without intake's --redis-wait-replicas 1 (-wait1, -nowait): a
//     private Redis Cluster of three masters with a replica each, or a
//     master, a replica and three sentinels; the master of a shard is
//     killed with -9, its replica promoted, the old master restarted as a
//     replica. Without WAIT a loss is recorded rather than failed (Redis
//     replication is asynchronous); nothing may be counted twice.
//     The short profile runs only redis-cluster-failover-wait1 of the
//     failover scenarios (postgres-failover too runs in make chaos only).
//
// The receipt test (receipt_test.go) runs a voter's receipt end to end:
// the projector signs, intake answers the receipt, tally audit receipt
// checks it offline and against a later checkpoint.
//
// Every scenario ends with the loadtest's verification: 0 lost, 0 counted
// twice, tallies equal to the ground truth, rebuild equal to the
// projection. It also checks that the queue drained (no backlog, nothing
// pending), that every dead letter is one the scenario wrote on purpose,
// and that no daemon exited on its own. It measures the time to drain
// after the last fault: from the moment the last fault was undone until
// every entry enqueued before that moment has been applied and deleted
// from its stream.
//
// # Running it
//
// The short version (every scenario, a few faults each, two scenarios at
// a time) runs with the other tests:
//
//	go test -race ./internal/chaos/
//
// The long version (more than 80 kills and crash-restarts, at 1,500 votes
// per second) prints a table of scenario, faults, events accepted, lost,
// counted twice, dead letters and time to drain:
//
//	TALLY_CHAOS=long go test ./internal/chaos/ -count=1 -run . -timeout 30m -v
//
// TALLY_CHAOS_RATE overrides the votes per second of either version,
// TALLY_CHAOS_OVERLAP_LATENCY_MS the latency of slow-postgres-overlap
// (default 150), and TALLY_TEST_LOG=1 shows the loadtest's own log.
//
// It needs redis-server, the PostgreSQL server binaries (initdb, pg_ctl)
// and the shared test PostgreSQL of package testenv. When run as root, the
// private PostgreSQL runs as the postgres OS user.
//
// # Files
//
//   - process.go: Build (the tally binary) and Process, a daemon run as a
//     child process that the suite kills and restarts;
//   - proxy.go: Proxy, the in-process TCP proxy that slows or cuts a link;
//   - backlog.go: Mark, the backlog a fault left behind, and the wait for
//     it to drain;
//   - cluster_test.go: one scenario's world (Redis, a database, intakes,
//     projectors, proxies) and its checks on the daemons;
//   - chaos_test.go: the profiles, TestMain and the table, the run every
//     scenario shares (send, inject, drain, verify, check), and the
//     scenarios themselves;
//   - degraded_test.go: postgres-down-degraded and its probe.
package chaos
