// Package admin owns intake's admin routes, for the applications that host
// polls: polls created (one or many in a request), closed, listed and
// read; principals added (idempotently under an Idempotency-Key, each
// with its credential shown once), listed and revoked. Every write goes
// through the ledger function the CLI runs (ledger.Store.EnsurePoll,
// ClosePoll, AddPrincipals, RevokePrincipal...), acting as the admin that
// asked, so it leaves the same definition leaf and admin_actions row; an
// admin's reads ask PostgreSQL, not the catalog. It owns the strict body
// reader whose refusals name the byte, key or field at fault, and the
// answers of a write the ledger refused.
//
// It never decides who a request is, nor holds the catalog or the
// revocations: intake answers those (Auth, Catalog) and brings what it
// holds up to date after a write (Ledger.CatchUp). It never writes the
// ledger but through ledger.Store's API, never while intake knows
// PostgreSQL does not answer (Ledger.Ask), and touches no Redis. Intake
// builds the mux and mounts the handlers on it.
package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"tally/credential"
	"tally/intake/internal/problem"
	"tally/ledger"
)

// Config is what the admin routes take of intake's Config; each field is
// the one of that name there, whose comment says more.
type Config struct {
	// TokenKey signs the credentials POST /v1/principals issues; nil: it
	// adds none (501).
	TokenKey *credential.Key
	// AddAdminsOverHTTP lets an admin add admins.
	AddAdminsOverHTTP bool
	// PostgresTimeout bounds the catch-up after a write.
	PostgresTimeout time.Duration
}

// Principal is the principal a request's bearer token names.
type Principal struct {
	ID   string
	Role string // ledger.RoleAdmin or RoleVoter
	// ExpiresAt is when the token expires; zero when it does not.
	ExpiresAt time.Time
}

// Auth is who a request is, as intake decides it.
type Auth interface {
	// Authenticate names the principal of r's bearer token, or answers
	// (400, 401, 429, 503) and returns false. It spends no read.
	Authenticate(w http.ResponseWriter, r *http.Request) (Principal, bool)
	// SpendRead spends one of the principal's reads (intake's
	// Config.ReadRate, which admin requests share with reads), or answers
	// 429 and returns false.
	SpendRead(w http.ResponseWriter, principalID string) bool
}

// Catalog is the catalog of polls intake holds in memory, from which a
// voter reads a poll as its votes are checked.
type Catalog interface {
	// Poll is poll id as the catalog holds it (without its eligibility
	// list) and whether principalID may vote on it; ledger.ErrNotFound
	// when it holds no such poll.
	Poll(id, principalID string) (p ledger.Poll, mayVote bool, err error)
}

// Ledger is how the admin routes reach PostgreSQL: through intake, which
// knows whether it answers and holds what the writes change.
type Ledger interface {
	// Ask runs ask unless PostgreSQL is known not to answer (an error
	// Skipped reports) or ctx's time has run out (ErrNotSent), and
	// records what it learned of PostgreSQL: a refusal is its answer, an
	// invalid request none.
	Ask(ctx context.Context, ask func() error) error
	// Skipped reports whether err is that of a request not sent, because
	// PostgreSQL did not answer the last one.
	Skipped(err error) bool
	// LedgerFailed logs err (unless Skipped) and answers 503.
	LedgerFailed(w http.ResponseWriter, r *http.Request, msg string, err error)
	// CatchUp brings the catalog and the revocations intake holds up to
	// date by the catalog's change log.
	CatchUp(ctx context.Context) error
}

// ErrNotSent is Ledger.Ask's error for a request whose time ran out
// before it was sent to PostgreSQL (its body came slowly, or intake was
// busy): nothing was stored, and PostgreSQL is not to blame.
var ErrNotSent = errors.New("the request's time ran out before it was sent to the database")

// The admin routes' own problems: a voter's token on an admin route, a
// poll id taken by another definition, and an intake not set up to do
// what was asked (no key to sign tokens, or a database login that may not
// manage the catalog).
var (
	probForbidden  = problem.Type{Slug: "forbidden", Title: "The principal may not do this"}
	probPollExists = problem.Type{Slug: "poll-exists", Title: "A poll with this id exists with another definition"}
	// idempotency-key-reused: POST /v1/principals under an Idempotency-Key
	// the admin used for another request.
	probIdempotencyKeyReused = problem.Type{Slug: "idempotency-key-reused", Title: "The Idempotency-Key was used with another request"}
	// invalid-definition: a poll's ballot or answers mode that breaks a
	// rule of its kind (a parameter out of range or of another kind):
	// well-formed JSON, so not invalid-request, but not a definition.
	probInvalidDefinition = problem.Type{Slug: "invalid-definition", Title: "The poll's definition breaks a rule"}
	probNotConfigured     = problem.Type{Slug: "not-configured", Title: "This intake is not set up for this request"}
)

// Admin serves the admin routes. Create it with New.
type Admin struct {
	cfg     Config
	store   *ledger.Store
	auth    Auth
	catalog Catalog
	ledger  Ledger
	log     *slog.Logger
}

// New returns the admin routes of store. New does no I/O.
func New(cfg Config, store *ledger.Store, auth Auth, catalog Catalog, lg Ledger, log *slog.Logger) *Admin {
	return &Admin{cfg: cfg, store: store, auth: auth, catalog: catalog, ledger: lg, log: log}
}
