package intake

import (
	"context"
	"errors"
	"net/http"
	"time"

	"tally/intake/internal/live"
	"tally/ledger"
)

// This file owns what intake lends the packages it mounts (live; the admin routes are to follow):
// host, which answers their interfaces (who a request is, the catalog,
// reads through what intake knows of PostgreSQL) from the
// Server's own stages, so that they need nothing else of it.

// host is the Server as the packages it mounts see it.
type host struct{ s *Server }

// newLive is the live page and stream of s.
func newLive(s *Server) *live.Live {
	h := host{s}
	cfg := live.Config{
		MaxLiveViewers: s.cfg.MaxLiveViewers, MaxLivePerAddr: s.cfg.MaxLivePerAddr, MaxLivePerPrincipal: s.cfg.MaxLivePerPrincipal,
		LiveInterval: s.cfg.LiveInterval, LiveIdle: s.cfg.LiveIdle, LiveHeartbeat: s.cfg.LiveHeartbeat,
		WriteTimeout: s.cfg.WriteTimeout, ReadCacheTTL: s.cfg.ReadCacheTTL,
	}
	refused := live.Refusals{
		Full:         s.metrics.bounds.WithLabelValues(boundLive),
		PerAddr:      s.metrics.bounds.WithLabelValues(boundLivePerAddr),
		PerPrincipal: s.metrics.bounds.WithLabelValues(boundLivePerPrincipal),
	}
	return live.New(cfg, s.store, h, h, h, refused, s.log)
}

// Principal authenticates a read and spends one of its principal's reads
// (live.Auth).
func (h host) Principal(w http.ResponseWriter, r *http.Request) (string, bool) {
	p, ok := h.s.principal(w, r)
	if !ok {
		return "", false
	}
	return p.ID, true
}

// Poll is poll id as the catalog holds it, and whether principalID may
// vote on it (live.Catalog).
func (h host) Poll(id, principalID string) (ledger.Poll, bool, error) {
	pi, err := h.s.catalog.lookup([]byte(id))
	if err != nil {
		return ledger.Poll{}, false, err
	}
	return pi.poll, pi.mayVote(principalID), nil
}

// Results is the poll's figures as the results route answers them
// (live.Reads).
func (h host) Results(ctx context.Context, id string) (ledger.Results, bool, error) {
	res, err := h.s.pollResults(ctx, id)
	return res.Results, res.Stale, err
}

// ReadResults reads the poll's figures now, and keeps them for the
// results route (live.Reads).
func (h host) ReadResults(ctx context.Context, id string) (ledger.Results, error) {
	s := h.s
	var res ledger.Results
	err := s.readLedger(ctx, func(ctx context.Context) (err error) {
		s.metrics.resultsReads.Inc()
		res, err = s.store.Results(ctx, id)
		return err
	})
	if err != nil {
		return ledger.Results{}, err
	}
	s.results.put(id, resultsRead{res: res, read: time.Now()})
	return res, nil
}

// ReadLedger runs read as intake's own reads run (readLedger).
func (h host) ReadLedger(ctx context.Context, read func(context.Context) error) error {
	return h.s.readLedger(ctx, read)
}

// Skipped reports whether err is that of a lookup not sent because
// PostgreSQL did not answer the last one (live.Reads).
func (h host) Skipped(err error) bool { return errors.Is(err, errPostgresDown) }

// LedgerFailed logs err (unless intake did not try PostgreSQL) and answers
// 503 (live.Reads).
func (h host) LedgerFailed(w http.ResponseWriter, r *http.Request, msg string, err error) {
	h.s.ledgerFailed(w, r, msg, err)
}
