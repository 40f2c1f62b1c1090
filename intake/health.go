package intake

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/singleflight"
)

// This file owns the health routes: GET /healthz (the process is up) and
// GET /readyz (a status per check, and whether to keep this instance in
// rotation), with the cache that makes a flood of checks cost one.

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// The statuses of a /readyz check. None carries a driver's error: those
// name users, databases, hosts and ports, and go to the log instead.
const (
	checkOK          = "ok"
	checkUnreachable = "unreachable"  // did not answer, or answered an error
	checkBreakerOpen = "breaker_open" // intake's Redis breaker is not closed
	checkBacklogFull = "backlog_full" // a shard's stream holds Config.MaxBacklog entries
	checkBacklogHigh = "backlog_high" // a shard's stream holds backlogHighShare of Config.MaxBacklog
	checkUnknown     = "unknown"      // could not be read: Redis did not answer
	checkLoading     = "loading"      // the catalog or the revocations were never loaded
	checkNoKeys      = "no_keys"      // an OpenID Connect issuer's keys were never fetched
)

// readiness is the answer of /readyz.
type readiness struct {
	Status string            `json:"status"` // ready, degraded or not ready
	Checks map[string]string `json:"checks"` // postgres, redis, backlog, catalog (and oidc): a check status each
	Down   []string          `json:"down,omitempty"`
	// BacklogEntries is the longest stream shard's entries as this check
	// read them; absent while Redis does not answer.
	BacklogEntries *int64 `json:"backlog_entries,omitempty"`
	code           int    // 200, or 503 for not ready
}

// readyCache holds the last answer of /readyz, so that a flood of health
// checks costs PostgreSQL and Redis one check per Config.ReadCacheTTL.
type readyCache struct {
	group singleflight.Group

	mu   sync.Mutex
	last *readiness // never changed once stored
	at   time.Time
}

// handleReady answers /readyz with a status per check:
//
//   - postgres: ok or unreachable.
//   - redis: ok, unreachable, or breaker_open (votes are refused at once
//     until a trial succeeds; this check's ping is one).
//   - backlog: ok, backlog_high (a shard's stream holds backlogHighShare
//     of Config.MaxBacklog entries: the projectors fall behind, and votes
//     will be refused at the bound), backlog_full (a shard's stream holds
//     Config.MaxBacklog entries, so votes on it are answered 503
//     backlog-full), or unknown while Redis does not answer. The answer
//     also carries the longest shard's entries (backlog_entries), and
//     each check sets tally_intake_stream_entries.
//   - catalog: ok, or loading until intake read the polls and the
//     revocations once (it started while PostgreSQL did not answer).
//   - oidc, when intake trusts an OpenID Connect issuer: ok, or no_keys
//     while an issuer's keys were never fetched (its tokens get 503
//     unavailable; tally's own tokens are not concerned).
//
// 503 "not ready" (with Retry-After) means take this instance out of
// rotation: Redis does not answer it, or its breaker is open, or it never
// loaded its catalog, so it can accept no vote, and another instance may
// well serve. 200 "degraded" means keep it in rotation and alert:
// PostgreSQL does not answer, a backlog is high or full, or an issuer's keys were
// never fetched. Without PostgreSQL an intake still accepts the votes
// of the principals it knows on the polls it holds and answers stale
// results, and every intake shares the one PostgreSQL (and the streams):
// taking them all out of rotation would turn those answers, and the 503s
// with Retry-After of the rest, into connection errors. An intake cut off
// from PostgreSQL while the others reach it cannot tell that from an
// outage, and so stays in rotation too; tally_intake_postgres_reachable
// tells them apart. A failed check's error goes to the log with the
// check's name. The answer is reused for Config.ReadCacheTTL, and callers
// that arrive while a check runs share it.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	rd := s.readiness(r.Context())
	if rd.code != http.StatusOK {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, rd.code, rd)
}

// readiness is the last answer of /readyz, or a new one when it is older
// than Config.ReadCacheTTL.
func (s *Server) readiness(ctx context.Context) *readiness {
	c := s.ready
	c.mu.Lock()
	last, at := c.last, c.at
	c.mu.Unlock()
	if last != nil && time.Since(at) < s.cfg.ReadCacheTTL {
		return last
	}
	v, _, _ := c.group.Do("", func() (any, error) {
		rd := s.checkReady(context.WithoutCancel(ctx))
		c.mu.Lock()
		c.last, c.at = rd, time.Now()
		c.mu.Unlock()
		return rd, nil
	})
	return v.(*readiness)
}

// checkReady runs the checks of /readyz, each bounded by its timeout.
func (s *Server) checkReady(ctx context.Context) *readiness {
	var pgErr, redisErr error
	backlog := checkUnknown
	var entries *int64
	var wg sync.WaitGroup
	wg.Go(func() {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.PostgresTimeout)
		defer cancel()
		pgErr = s.store.Ping(pctx)
		s.pg.observe(ctx, pgErr)
	})
	wg.Go(func() {
		var longest int64
		longest, redisErr = s.readyRedis(ctx)
		if redisErr == nil {
			entries, backlog = &longest, backlogCheck(longest, s.cfg.MaxBacklog)
		}
	})
	wg.Wait()

	rd := &readiness{Status: "ready", code: http.StatusOK,
		Checks: map[string]string{"postgres": checkOK, "redis": checkOK, "backlog": backlog, "catalog": checkOK}, BacklogEntries: entries}
	if !s.catalog.loaded() || !s.revoked.loaded() {
		rd.Checks["catalog"] = checkLoading
	}
	if pgErr != nil {
		rd.Checks["postgres"] = checkUnreachable
		s.log.LogAttrs(ctx, slog.LevelWarn, "readiness check failed",
			slog.String("check", "postgres"), slog.String("error", pgErr.Error()))
	}
	switch {
	case errors.Is(redisErr, gobreaker.ErrOpenState) || errors.Is(redisErr, gobreaker.ErrTooManyRequests):
		rd.Checks["redis"] = checkBreakerOpen
	case redisErr != nil:
		rd.Checks["redis"] = checkUnreachable
		s.log.LogAttrs(ctx, slog.LevelWarn, "readiness check failed",
			slog.String("check", "redis"), slog.String("error", redisErr.Error()))
	case s.breaker.State() != gobreaker.StateClosed:
		rd.Checks["redis"] = checkBreakerOpen
	}
	s.checkIssuers(ctx, rd)
	for name, st := range rd.Checks {
		if st != checkOK {
			rd.Down = append(rd.Down, name)
		}
	}
	slices.Sort(rd.Down)
	switch {
	case rd.Checks["redis"] != checkOK || rd.Checks["catalog"] != checkOK:
		rd.Status, rd.code = "not ready", http.StatusServiceUnavailable
	case len(rd.Down) > 0:
		rd.Status = "degraded"
	}
	return rd
}

// checkIssuers adds the oidc check to rd when intake trusts an OpenID
// Connect issuer: no_keys while an issuer's keys were never fetched. It
// reads memory only: the keys are fetched by Serve's background work.
func (s *Server) checkIssuers(ctx context.Context, rd *readiness) {
	v := s.cfg.Credentials
	if v == nil || len(v.Issuers()) == 0 {
		return
	}
	rd.Checks["oidc"] = checkOK
	if missing := v.IssuersWithoutKeys(); len(missing) > 0 {
		rd.Checks["oidc"] = checkNoKeys
		s.log.LogAttrs(ctx, slog.LevelWarn, "readiness check failed", slog.String("check", "oidc"),
			slog.String("error", "no keys fetched yet from "+strings.Join(missing, ", ")))
	}
}

// backlogCheck is the backlog check's status when the longest shard holds
// longest entries: full at bound, the length at which the enqueue script
// refuses votes, and high from backlogHighShare of it.
func backlogCheck(longest, bound int64) string {
	switch {
	case longest >= bound:
		return checkBacklogFull
	case float64(longest) >= backlogHighShare*float64(bound):
		return checkBacklogHigh
	}
	return checkOK
}

// readyRedis pings Redis and reads the length of every shard's stream (XLEN
// is O(1)) in one round trip, through the breaker: once the breaker lets a
// trial through, a check that succeeds closes it, so an instance that gets
// no votes while it is not ready still becomes ready again. It sets the
// gauge of each shard's entries and returns the longest shard's.
func (s *Server) readyRedis(ctx context.Context) (longest int64, err error) {
	_, err = s.breaker.Execute(func() (any, error) {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
		defer cancel()
		pipe := s.rdb.Pipeline()
		pipe.Ping(ctx)
		lens := make([]*redis.IntCmd, s.keys.Shards())
		for i := range lens {
			lens[i] = pipe.XLen(ctx, s.keys.Stream(i))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		vals := make([]int64, len(lens))
		for i, n := range lens {
			vals[i] = n.Val()
		}
		longest = s.metrics.observeStreams(vals)
		return nil, nil
	})
	return longest, err
}
