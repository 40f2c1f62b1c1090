// Package loadtest sends synthetic, authorized votes to tally's intake and
// then proves, against the ledger, that nothing accepted was lost and
// nothing was counted twice. It is what `tally loadtest` runs, and what the
// fault tests drive while they kill and restart the processes under it.
//
// # What it does
//
// A Session creates its own polls (ids "lt-<random>-<round>") and
// Config.Principals principals in the ledger; their bearer tokens live in
// memory only. It then sends Config.Votes votes (or sends for
// Config.Duration) to POST /v1/votes over keep-alive HTTP connections, at
// Config.Rate votes per second or as fast as Config.Concurrency workers go.
// Every principal answers each poll once; when the principals run out of
// polls to answer, the next round's poll is created. Configurable shares
// of the votes are:
//
//   - exact retries: a key already answered 202, sent again with the same
//     payload. Intake must answer 202 with the same event id, and the
//     ledger must end with one effect;
//   - key reuse: a key already answered 202, sent with another candidate.
//     Intake must answer 409 and the tally must not change;
//   - second responses: a principal whose vote in a poll was answered 202
//     votes in it again with a new key. Intake may answer 202 or 409; the
//     ledger must reject it as already_responded.
//
// A second response or a reuse of a key is only sent once the key it
// depends on was answered 202, so the response each principal should have
// counted is known: the first one accepted.
//
// Config.Kind and Config.Answers set the polls' ballot kind and answers
// mode (ballots.go): every kind but single sends a "ballot" from a fixed
// set of valid ballots, and the tallies checked are every figure of the
// kind (ledger.ResultsOf of the ballots that count). With answers latest a
// second response is recorded and replaces the principal's ballot: the one
// counted is its last in the poll's log, which must hold its ballots in
// the order they were sent (a ballot sent after another was answered 202
// comes after it), and each ballot but the last must read superseded, by
// the last.
//
// A request that gets no answer (connection refused or reset, timeout) is
// sent again with the same key, as a real client would, and 429 and 503 are
// sent again after their Retry-After; both a bounded number of times
// (Config.MaxAttempts). A vote that never got a definite answer is
// "uncertain": it may or may not be in the ledger, and either is correct.
//
// # What it verifies
//
// After sending, Drain waits (at most Config.DrainTimeout) until the queue
// is empty: no entry in the streams and none pending. Verify then reads the
// loadtest's polls from the ledger and checks, against the ground truth the
// session kept of every key it sent and every answer it got:
//
//   - lost: every key answered 202 ends recorded, or rejected with the
//     expected reason (already_responded for a second response). A key
//     with neither a ledger row nor a rejection record is lost;
//   - counted twice: every ledger row of the loadtest's polls belongs to a
//     key that was accepted (or is uncertain), with the payload it was
//     accepted with, at most one per key and one per principal and poll;
//     any other row is counted twice;
//   - the tallies of the projection (ledger.Store.Results) equal the
//     ground truth exactly: for each principal and poll, the candidate of
//     the first response accepted;
//   - rebuild (ledger.Store.Rebuild) equals the projection;
//   - intake answered as the rules say: retries 202 with the same event id,
//     key reuse 409, first responses never refused for good by a 4xx.
//
// Report.Failures lists every broken rule in words; it is empty when the
// run passed. Lost and CountedTwice must both be 0.
//
// With several projectors, or a projector killed while it held entries,
// a principal's second response may reach the ledger before the first (a
// later projector claims the first only after its idle time): the ledger
// then counts the second and rejects the first. That is not a loss nor a
// double count, but it changes which candidate is counted.
// Config.AllowReorder accepts it (the tally then follows the response the
// ledger recorded, which must be one the principal had accepted);
// without it such a swap is a failure.
//
// # Using it
//
// Run does everything in order: New, Setup, Send, Drain, Verify, Close. A
// test that injects faults may call the steps itself, read Session.Progress
// while Send runs, and change the ledger between Drain and Verify to see
// the verification fail. Close closes the polls and revokes the tokens, so
// a loadtest leaves no open poll and no usable token behind.
//
// # Files
//
//   - config.go: Config and Deps, their defaults and validation;
//   - session.go: Session, New, Run and Close (the polls closed, the
//     tokens revoked);
//   - setup.go: Setup (principals, the first poll, the dead letters
//     before), the polls created round by round, and the retry of ledger
//     writes that fail transiently;
//   - send.go: Send, its workers and their schedule, and one vote's
//     requests until it has a final answer (the backoff between them);
//   - post.go: one POST /v1/votes, sent once through the client package
//     (tally/client), and how its answer is read;
//   - ballots.go: the polls' rules and the ballots sent, by kind;
//   - truth.go: the ground truth: the votes planned, every key sent and
//     what intake answered;
//   - drain.go: Drain, the wait for the queue to empty;
//   - queue.go: Queue, what the loadtest reads of the queue (RedisQueue);
//   - verify.go: Verify, the ledger checked against the ground truth;
//   - report.go: Report, what a run found, and how it is assembled;
//   - progress.go: Progress and the loop that reports it while sending
//     and draining.
package loadtest
