// Package projector owns the consumer side of tally's queue: it reads the
// votes intake enqueued on the Redis streams, applies them in bounded
// batches to the ledger, and removes each entry from its stream only once
// its effect has committed.
//
// # What it promises
//
//   - One transaction per batch. A batch is applied when it holds
//     Config.BatchSize entries or when Config.BatchWait has passed since its
//     first entry arrived, whichever comes first, as soon as a worker is
//     free; a timer independent of the blocking stream read decides the
//     wait. The batch goes to the ledger
//     in one Append call, so it is never half-applied.
//   - Bounded overlap, per-principal order. Up to Config.Workers batches
//     are applied at once, each in its own transaction. Entries are split
//     among the workers by principal, so the entries of one principal
//     reach the ledger in stream order, as with one worker, and the first
//     of a principal's answers is the one counted. A busy worker's
//     entries wait in its mailbox without holding up the other workers;
//     once a mailbox holds a full batch the projector stops reading, so
//     memory stays bounded. Between several projectors the
//     ledger decides every conflict (the first to commit wins); an entry
//     claimed while another consumer still applies it commits once and
//     answers duplicate the second time (I2).
//   - Ack after commit (I4). Entries are acknowledged and deleted (XACK and
//     XDEL in a MULTI) only after Append returned their
//     outcomes, by a goroutine of their own while the workers go on with
//     the next batches; Run returns only once every committed batch has been
//     acknowledged (or its acknowledgement failed, when the entries come
//     back and answer duplicate). When Append fails, nothing is
//     acknowledged: the entries stay pending and are applied again later,
//     and the ledger answers duplicate for whatever had in fact committed
//     (I2).
//   - Nothing is dropped silently (I1). An entry that cannot be decoded,
//     whose fingerprint does not match its payload (entries of version 1,
//     see stream.Decode), that fails in the
//     ledger for a reason other than a transient error, or that was
//     delivered more than Config.MaxDeliveries times (unless this projector
//     saw it fail only for transient reasons), is copied to its shard's
//     dead-letter stream with its original fields and the reason, then
//     acknowledged and removed from the main stream, in one script: the
//     dead-letter record is written first, and only while the entry is
//     still pending, so two consumers holding it write one record. A batch
//     that fails for a permanent reason is split by bisection so the rest
//     of it commits, and the entries that fail alone are dead-lettered.
//     When not one entry of the batch commits, the database is more likely
//     at fault than every entry (a missing migration, a permission): the
//     entries stay pending, the projector slows down, and only
//     MaxDeliveries dead-letters them; unless another worker's batch
//     committed meanwhile, which shows the database takes writes, and
//     then the entries are dead-lettered at once. An entry Redis reports as deleted
//     while still pending is counted and logged as lost, and leaves a
//     tombstone in the dead-letter stream.
//   - Recovery. At start a projector re-reads its own pending entries;
//     every Config.ClaimInterval it claims (XAUTOCLAIM) entries that another
//     consumer, dead or stuck, left pending for longer than Config.MinIdle.
//     It never claims an entry it holds in flight itself (read, in a batch,
//     or committed and not yet acknowledged), however slow its batch: that
//     entry stays its own, its idle time started again, and counts no
//     second delivery; deleted from the stream meanwhile, it is still
//     applied, and not counted lost. Its own entries that a failure left
//     pending are claimed like any other.
//   - Transient errors (ledger.IsRetryable) are retried with bounded
//     exponential backoff and jitter. A circuit breaker stops reading
//     and claiming while PostgreSQL fails, and lets one probe through after
//     Config.BreakerOpenFor; the projector resumes by itself.
//   - Signed checkpoints. Given the log's signer key (Config.LogSigner),
//     the projector signs every Config.CheckpointInterval the head of each
//     poll's log that changed and stores the checkpoint; a failure there is
//     logged, counted and tried again, and never holds up the votes.
//   - Clean stop. Run returns nil once its context is cancelled: it stops
//     reading, waits for every batch in flight and applies the one it was
//     filling, all within Config.ShutdownGrace, acknowledges what
//     committed, abandons the rest to a later claim, and leaves the
//     consumer group when nothing is pending on it. Streams are never
//     trimmed.
//
// Several projectors may share the work as members of one consumer group
// (stream.Group); the ledger's idempotency makes overlapping deliveries
// harmless.
//
// The Redis client may be one server's, Sentinel's (a redis.Client of the
// current master) or a Redis Cluster's (*redis.ClusterClient). On a
// cluster no command or transaction spans two streams, whose hash slots
// differ: each stream has its own blocking reader, its own XAUTOCLAIM and
// its own MULTI of XACK and XDEL; on one server one reader and one MULTI
// serve every stream.
//
// The package also gives operators what the tally command shows them:
// Inspect for backlog, pending entries and dead letters, and DeadLetters
// (List, Get, Replay, Purge) to look at and drive failed entries again.
//
// # Files
//
// An entry goes read -> lanes -> apply -> ack (or deadletter); a change
// goes in the file of its stage.
//
//   - config.go: Config, DefaultConfig (the one place for defaults), and
//     their validation.
//   - projector.go: the Projector, New, and Run, which starts the stages
//     and stops them in order; the shared waits (sleep, backoff).
//   - read.go: the blocking stream readers and the message type they hand
//     on, each entry decoded once there into the event the ledger takes;
//     the retry of failed Redis calls.
//   - recover.go: this consumer's own pending entries at start, the
//     periodic claim of idle entries (XAUTOCLAIM) that passes over those
//     in flight here, and leaving the group.
//   - inflight.go: the entries this projector holds, from the read to
//     their acknowledgement.
//   - lanes.go: the split by principal (vote.Lanes) into one mailbox per
//     worker, and each lane gathering its batches.
//   - apply.go: one batch through its layers: triage, bisection on
//     permanent failures, retries on transient ones, the Append call; the
//     memory of each entry's last failure.
//   - breaker.go: the PostgreSQL circuit breaker and what counts as a
//     transient error.
//   - ack.go: counting a committed batch's outcomes and XACK+XDEL after
//     commit, in a goroutine of its own.
//   - deadletter.go: the dead-letter record (Reason, the dl_ fields) and
//     the script that writes it.
//   - deadletter_admin.go: DeadLetters, the operator's list, get, replay
//     and purge.
//   - checkpoints.go: with the log's signer key, the periodic signing of
//     the polls' log heads that changed (Checkpointer).
//   - inspect.go: Inspect, and the gauges refreshed from it.
//   - metrics.go: the Prometheus series.
package projector
