package intake

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"tally/intake/internal/admin"
	"tally/intake/internal/live"
	"tally/ledger"
)

// This file owns what intake lends the packages it mounts (live, admin):
// host, which answers their interfaces (who a request is, the catalog,
// reads and writes through what intake knows of PostgreSQL) from the
// Server's own stages, so that they need nothing else of it.

// MaxPrincipalsPerRequest bounds the names one POST /v1/principals takes.
const MaxPrincipalsPerRequest = admin.MaxPrincipalsPerRequest

// ParsePoll reads one poll as POST /v1/polls reads its body, strictly (no
// unknown key, no key twice, nothing after the object), for tally poll
// create --from. Its error says what is wrong: a *vote.RuleError or
// *ledger.FieldError names the field. The poll's ID is set when the body
// gave one, even with an error.
func ParsePoll(body []byte) (ledger.Poll, error) { return admin.ParsePoll(body) }

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

// newAdmin is the admin routes of s.
func newAdmin(s *Server) *admin.Admin {
	h := host{s}
	cfg := admin.Config{TokenKey: s.cfg.TokenKey, AddAdminsOverHTTP: s.cfg.AddAdminsOverHTTP, PostgresTimeout: s.cfg.PostgresTimeout}
	return admin.New(cfg, s.store, h, h, h, s.log)
}

// Authenticate names the principal of the request's bearer token, spending
// no read (admin.Auth).
func (h host) Authenticate(w http.ResponseWriter, r *http.Request) (admin.Principal, bool) {
	p, ok := h.s.principalBy(w, r, time.Time{})
	if !ok {
		return admin.Principal{}, false
	}
	return admin.Principal{ID: p.ID, Role: p.Role, ExpiresAt: p.expiresAt}, true
}

// SpendRead spends one of the principal's reads (admin.Auth).
func (h host) SpendRead(w http.ResponseWriter, principalID string) bool {
	return h.s.spendRead(w, &voter{Principal: ledger.Principal{ID: principalID}})
}

// Ask runs a read or write of the admin routes unless PostgreSQL is known
// not to answer (then errPostgresDown), and tells pgState what it learned:
// a refusal is PostgreSQL's answer, an invalid request none (admin.Ledger).
// A request whose time ran out before it was asked (a large body read
// slowly) returns admin.ErrNotSent and tells pgState nothing: it never
// reached PostgreSQL, and taking it for an outage would refuse the next
// admin writes.
func (h host) Ask(ctx context.Context, ask func() error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", admin.ErrNotSent, err)
	}
	if h.s.pg.skip(time.Now()) {
		return errPostgresDown
	}
	err := ask()
	switch {
	case errors.Is(err, ledger.ErrInvalid):
	case errors.Is(err, ledger.ErrExists) || errors.Is(err, ledger.ErrNotPermitted):
		h.s.pg.observe(ctx, nil)
	default:
		h.s.pg.observe(ctx, err)
	}
	return err
}

// CatchUp brings the catalog and the revocations up to date by the
// catalog's change log (admin.Ledger).
func (h host) CatchUp(ctx context.Context) error { return h.s.follow.catchUp(ctx) }

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
	s.results.put(id, resultsRead{res: res, read: s.results.now()})
	return res, nil
}

// ReadLedger runs read as intake's own reads run (readLedger).
func (h host) ReadLedger(ctx context.Context, read func(context.Context) error) error {
	return h.s.readLedger(ctx, read)
}

// Skipped reports whether err is that of a lookup not sent because
// PostgreSQL did not answer the last one (live.Reads, admin.Ledger).
func (h host) Skipped(err error) bool { return errors.Is(err, errPostgresDown) }

// LedgerFailed logs err (unless intake did not try PostgreSQL) and answers
// 503 (live.Reads, admin.Ledger).
func (h host) LedgerFailed(w http.ResponseWriter, r *http.Request, msg string, err error) {
	h.s.ledgerFailed(w, r, msg, err)
}
