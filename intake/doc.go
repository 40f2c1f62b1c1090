// Package intake is tally's HTTP daemon: it authenticates a vote, checks it
// against the catalog, rate-limits it and durably enqueues it on the
// principal's Redis stream shard, and answers the reads (an event's
// status, results, the poll's log). It never writes the ledger: the
// projector applies what intake enqueued, and the admin routes intake
// mounts (package intake/internal/admin) write polls and principals
// through the ledger's API. Intake builds the mux, and mounts on it the
// live results stream and page (package intake/internal/live) and the
// admin routes; they take from it only the narrow interfaces they name
// (who a request is, the catalog, reads and writes through what intake
// knows of PostgreSQL), which mount.go answers.
//
// # HTTP surface
//
//	POST /v1/votes                    enqueue one vote (a candidate_id, or a
//	                                  ballot of the poll's kind); 202 + status URL
//	GET  /v1/votes/{event_id}         the caller's own event and its outcome;
//	                                  a recorded vote's receipt
//	GET  /v1/polls/{poll_id}/results  tallies from the projection, with the
//	                                  tree size of the log they count
//	GET  /v1/polls/{poll_id}/checkpoint   the log's latest signed checkpoint
//	GET  /v1/polls/{poll_id}/consistency  a consistency proof (?from=N&to=M)
//	GET  /v1/polls/{poll_id}          a poll's definition (its ballot kind):
//	                                  to a voter, of a poll it may vote on
//	GET  /v1/polls/{poll_id}/live     the results as Server-Sent Events
//	GET  /polls/{poll_id}             the live results page (HTML)
//	GET, POST /v1/polls; POST /v1/polls/{poll_id}/close;
//	GET, POST /v1/principals; POST /v1/principals/{principal_id}/revoke
//	                                  the admin routes (package admin)
//	GET  /healthz                     the process is up
//	GET  /readyz                      a status per check: postgres, redis, backlog (oidc)
//	GET  /metrics                     Prometheus metrics
//	GET  /openapi.json                the OpenAPI 3.1 document of these routes
//
// Every /v1 route needs one "Authorization: Bearer TOKEN" header;
// /healthz, /readyz, /metrics and /openapi.json need none. What a
// principal may not see it cannot learn exists: a restricted poll
// answers a principal outside its list (its votes, its results, its
// events' reasons) exactly as an unknown poll does. Every error is an
// RFC 9457 application/problem+json document whose detail says what was
// wrong and what to do about it; a 401 carries the RFC 6750 challenge
// ("Bearer", or error="invalid_token" for a refused token), and a path not
// spelled as a route gets a problem+json 404.
//
// # What it promises
//
//   - 202 only after Redis acknowledged the XADD, and with
//     Config.WaitReplicas > 0 only after WAIT confirmed it on that many
//     replicas. 202 means accepted for processing, never counted.
//   - One vote is one decision of a Lua script (EVALSHA), atomic in Redis:
//     it checks and records the idempotency key, applies the per-principal
//     rate limit (GCRA on Redis' own clock), refuses when the shard's
//     stream already holds Config.MaxBacklog entries, and XADDs the entry.
//     Streams are never trimmed. Votes that arrive while a round trip is
//     under way share the next one (Config.EnqueuePipelines pipelines at a
//     time, without any added delay), and the votes of one shard in a
//     pipeline share one call of the script, which decides each in turn
//     and answers each its own reply. Every key the script touches carries
//     the shard's hash tag, so it also runs on Redis Cluster. A new vote
//     costs PostgreSQL nothing (with Config.LedgerCheck, the vote of a
//     principal older than the idempotency window costs a share of a
//     ledger query; see below).
//   - Idempotency keys (the client's event_id) are scoped to the principal.
//     The same key with the same payload answers 202 again with the same
//     event_id and enqueues nothing; the same key with another payload
//     answers 409 and enqueues nothing. A replay or a conflict is answered
//     before the rate limit, since it enqueues nothing; only what is enqueued
//     consumes the rate. Idempotency comes before admission: a vote the
//     catalog would refuse (poll closed, choice or eligibility changed) is
//     first looked up, in its Redis record and else in the ledger (a 404,
//     in its Redis record only), so a known identical event answers 202
//     and a known key with another payload 409 whatever changed since. A
//     replayed 202 states the status the ledger knows (pending while it is
//     not there yet). Records expire after Config.IdempotencyWindow. Past
//     it a retry, or a key reused with another payload, is enqueued as a
//     new vote and the ledger settles it: a duplicate, or rejected
//     key_reused, never counted twice. With Config.LedgerCheck the ledger
//     answers first instead (its rule, once: ledger_check.go).
//   - The identity comes from the bearer token only, never from the body.
//     A signed credential (package credential: tally's own token, or an
//     OpenID Connect issuer's) is verified in memory, with no query; the
//     revoked principals and retired keys are held in memory (loaded at
//     start, kept current by the catalog's change log, as the polls are)
//     and checked on every request in every state, a PostgreSQL outage
//     included. A token of the form "tly_..." (a stored kind no release
//     took) gets 401 saying to ask for a signed credential.
//   - Polls, choices and eligibility are held whole in an in-process
//     catalog, loaded at start in pages (each a query of its own under
//     Config.PostgresTimeout, the whole within Config.CatalogLoadTimeout
//     before intake serves, and on in the background past it) and kept
//     current by the catalog's change log: intake applies the changes
//     after the last one it applied, reading again only the polls,
//     principals and keys they name, on each NOTIFY on channel
//     tally_catalog, on every reconnection of its listener, every
//     Config.CatalogRefresh (one indexed query when nothing changed) and
//     after its own admin writes, before their answer. It loads the
//     catalog whole again only when it fell behind the trimmed log. A
//     failed or slow read of the catalog is logged and tried again, and
//     never taken for a PostgreSQL outage. A poll id it does not
//     hold is answered 404 from memory, with no query, as a hidden poll
//     is, so a vote costs no PostgreSQL round trip. The ledger stays the
//     arbiter: an event that raced a catalog change is rejected there with
//     a reason.
//   - While Redis fails, a circuit breaker opens and POST answers 503 with
//     Retry-After at once instead of piling up goroutines; /readyz says so.
//   - While PostgreSQL does not answer, intake degrades where that is safe:
//     every valid signed credential keeps voting on the polls the catalog
//     holds, results answer the last figures read marked stale, a vote
//     accepted since answers pending, and /readyz reads 200 degraded.
//     None of it outlives the outage.
//   - Results and /readyz are read at most once per Config.ReadCacheTTL
//     (per poll), concurrent reads sharing one query.
//   - A flood cannot load intake through authentication, nor PostgreSQL
//     through reads: past Config.AuthFailureBurst failed authentications
//     from one client address (only a refused token counts), its requests
//     get 429 before their token's signature is checked, so a flood of
//     forged tokens costs no signature check (and a valid one from that
//     address waits too). Past Config.ReadBurst reads, a principal's reads get 429. Both limits
//     live in this process's memory, keyed by a keyed hash (no address is
//     stored or logged) in tables of bounded size.
//   - Metrics carry bounded labels only (route template, status code,
//     outcome), never a principal, token or event id.
//
// Server.Run serves until its context is cancelled, then stops accepting,
// drains requests in flight within Config.ShutdownTimeout and returns. It
// serves plain HTTP by default; with Config.TLSCertFile and TLSKeyFile it
// serves TLS 1.2 or later with HTTP/2, and picks up a certificate rotated
// on disk within a second, without a restart.
//
// # Files
//
// A vote goes through middleware.go, post_vote.go, enqueue.go and
// batcher.go, in that order; each file owns one stage:
//
//   - server.go: the lifecycle. New wires the stages, Run and ServeAdmin
//     serve (the data listener and, with Config.AdminListen, the admin
//     one) and keep the catalog fresh, drain stops.
//   - limit_listener.go: the listener that caps open connections
//     (Config.MaxConns) and those of one client address
//     (Config.MaxConnsPerAddr, with package intake/internal/holds: the
//     tables of what each client address or principal holds open).
//   - config.go: Config and its defaults; config_validate.go, its
//     validation (ConfigError names the field).
//   - conn_errors.go: net/http's error log: connection errors counted by
//     kind, logged without client addresses, the first of a kind at once
//     and then a summary a minute.
//   - tls.go: the TLS settings and the reloader of a rotated certificate.
//   - middleware.go: the routes, the method check, the request deadline,
//     panic recovery and request metrics (instrument), the canonical-path
//     check, closing the connection after a chunked request (framed), and
//     the log line of a failed request; request_auth.go: authentication
//     (the bearer token, its 401 challenges, the principal it names) and
//     the spending of a principal's reads.
//   - mount.go: what intake lends the packages it mounts (host: their
//     interfaces answered from the Server's stages), and ParsePoll for
//     tally poll create --from. The admin routes are package
//     intake/internal/admin (an admin's authentication through intake, the
//     strict body reader, whose refusals name the byte, key or field at
//     fault as the vote's do; polls created, one or many in a request,
//     closed, listed and read; principals added, idempotently under an
//     Idempotency-Key, listed and revoked), each write through the ledger
//     function the CLI runs. An admin adds voters; admins only with
//     Config.AddAdminsOverHTTP, and their tokens expire no later than the
//     asking admin's.
//   - limits.go: the limits kept in memory, of failed authentications per
//     client address and of reads per principal.
//   - credentials.go: the signed credentials, verified in memory once the
//     address's allowance of failed authentications is checked, the
//     refusal of a revoked principal, a retired key of tally's own, or a
//     token a reissue replaced, and the 401 that names the key of a token
//     signed by one this intake does not hold (Config.CredentialKeyIDs);
//     revocations.go: the revocations (and reissued principals'
//     valid-after times) held in memory, kept current by the catalog's
//     change log.
//   - auth.go: the voter, a principal with its enqueue arguments made
//     once.
//   - catalog.go: the in-process catalog of polls, choices and
//     eligibility; changes.go: the follower of the catalog's change log,
//     which loads the catalog and the revocations and keeps them current.
//   - read_vote.go: the first step of a vote: content type, size, body.
//   - post_vote.go: POST /v1/votes as its steps (readVote, admit, enqueue,
//     answerEnqueue) and the table of the answer to each enqueue outcome.
//   - known_status.go: what a refused vote or a replay answers for an
//     event intake already knows (its Redis record, else the ledger).
//   - parse.go: the vote body's rules, parseVote and its fast path for the
//     plain form; parse_strict.go: the strict parser that takes every JSON
//     form (a ballot as its raw value) and says what is wrong. admit, in
//     post_vote.go, reads a ballot against its poll's kind and checks it
//     against its rules (vote.ParseBallot, Rules.Check), and the canonical
//     form is what the idempotency record and the stream entry carry, and
//     what the ledger's fingerprint binds.
//   - enqueue.go: the enqueue step, through the circuit breaker and the
//     batcher, and its outcomes.
//   - ledger_check.go: with Config.LedgerCheck, the ledger lookup of a new
//     event id the script could not rule out, and the collector that shares one query among
//     concurrent votes' lookups.
//   - script.go: the enqueue script, its argument layout and its reply.
//   - batcher.go: the pipelines that carry concurrent votes' scripts to
//     Redis, each vote answered by its deadline; batcher_send.go: one
//     pipeline's way there (a script call per shard, per master with WAIT
//     on a cluster) and each vote's reply back.
//   - reads.go: GET /v1/votes/{event_id}, GET /v1/polls/{poll_id}/results
//     and its cache; health.go: /healthz, and /readyz and its cache.
//   - log_routes.go: each poll's Merkle log: GET .../checkpoint, GET
//     .../consistency, and the receipt of a recorded vote (its inclusion
//     proof against the latest signed checkpoint), shown to whoever may see
//     the poll's results.
//   - package intake/internal/live: GET /v1/polls/{poll_id}/live, the
//     results as Server-Sent Events, with the bounds per address and per
//     principal; the hub that feeds them from one LISTEN connection,
//     reading a notified poll once for all its viewers; GET
//     /polls/{poll_id}, the server-rendered page that reads that stream.
//   - degraded.go: whether PostgreSQL answers intake's lookups, and so
//     when intake answers from what it read before.
//   - problem.go: the problem types only intake's own routes answer (the
//     document, the shared types and the refusals every route shares are
//     package intake/internal/problem's); problem_edges.go: the problem
//     types of a request's framing, headers and path; metrics.go: the
//     Prometheus metrics.
//   - openapi.go: GET /openapi.json, the embedded openapi.json: every
//     route, status, header and body above, which every HTTP test
//     validates its requests and answers against.
package intake
