package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors callers branch on with errors.Is.
var (
	// ErrNotFound: the poll, principal or event asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: a poll or principal with that id already exists.
	ErrExists = errors.New("already exists")
	// ErrAppendOnly: something tried to change or remove a row of an
	// append-only table (the ledger, its log, admin_actions); the message
	// names the table.
	ErrAppendOnly = errors.New("append-only")
	// ErrBatchTooLarge: Append was given more events than Config.MaxBatch.
	ErrBatchTooLarge = errors.New("batch too large")
	// ErrInvalid: an argument is malformed; the message says which.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotPermitted: the database login may not make this change (a
	// daemon granted tally_daemon, not tally_admin, managing polls).
	ErrNotPermitted = errors.New("the database login may not make this change")
	// errRetryable marks errors after which the same work may succeed when
	// tried again: lost connections, a server shutting down or full.
	errRetryable = errors.New("retryable")
	// errConflict marks a transaction that certainly rolled back because
	// of another's (a deadlock, a serialization failure, a race lost):
	// retryable, and runTx runs it again itself.
	errConflict = errors.New("conflict")
	// The server's refusals of a connection, which every try repeats.
	errNoDatabase      = errors.New("the database does not exist")
	errLoginRefused    = errors.New("the login was refused")
	errPasswordRefused = errors.New("the password was refused")
)

// IsRetryable reports whether err is transient: trying the same work again
// may succeed (a deadlock, a serialization failure, a connection lost or
// refused, a server shutting down). When a commit's answer was lost the
// outcome is uncertain, but a retry of Append is still safe: the ledger
// answers duplicate for what already committed.
func IsRetryable(err error) bool {
	k := kindOf(err)
	return k == errRetryable || k == errConflict
}

// isConflict reports a transaction that certainly rolled back because of
// another's: running it again is safe.
func isConflict(err error) bool { return kindOf(err) == errConflict }

// IsMissingDatabase reports PostgreSQL's answer that the database a
// connection names does not exist (3D000).
func IsMissingDatabase(err error) bool { return kindOf(err) == errNoDatabase }

// IsLoginRefused reports PostgreSQL's refusal of a login's role: it does
// not exist, may not log in, or pg_hba.conf admits it nowhere (28000).
func IsLoginRefused(err error) bool { return kindOf(err) == errLoginRefused }

// IsPasswordRefused reports PostgreSQL's refusal of a login's password
// (28P01).
func IsPasswordRefused(err error) bool { return kindOf(err) == errPasswordRefused }

// kindError is a translated error of a kind (errRetryable, errConflict, a
// refusal) that keeps its cause for errors.Is and errors.As.
type kindError struct{ err, kind error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.err, e.kind} }

// SQLSTATE codes kindOf knows.
const (
	codeUniqueViolation      = "23505"
	codeInvalidAuthorization = "28000"
	codeInvalidPassword      = "28P01"
	codeInvalidCatalogName   = "3D000"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeInsufficientPriv     = "42501"
	codeOutOfMemory          = "53200"
	codeTooManyConnections   = "53300"
	codeLockNotAvailable     = "55P03"
	codeAdminShutdown        = "57P01"
	codeCrashShutdown        = "57P02"
	codeCannotConnectNow     = "57P03"
)

// kindOf is the one table of what an error from pgx means to tally: one of
// this package's sentinels, or nil for an error that is only itself. It
// reads an error translated already (by the kind it carries) as well as
// pgx's own.
//
// Out of memory (53200) is not retryable. PostgreSQL says it when a
// backend runs out of memory or its shared lock table is full. The same
// batch needs the same on every try, so one that alone is too big would
// fail forever: retried, the projector would give it up and read it
// again, the same size, without end. Permanent, it is split in halves.
func kindOf(err error) error {
	var kind *kindError
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// An ended context is the caller's, and DeadlineExceeded would
		// pass for a net.Error below.
		return nil
	case errors.As(err, &kind):
		return kind.kind
	case errors.Is(err, errRaced), errors.Is(err, errRedefined):
		return errConflict
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return sqlstateKind(pgErr)
	}
	if isConnLost(err) {
		return errRetryable
	}
	return nil
}

// sqlstateKind is kindOf for an error the server sent.
func sqlstateKind(pgErr *pgconn.PgError) error {
	switch pgErr.Code {
	case codeUniqueViolation:
		if pgErr.TableName == "poll_events" {
			// Only Append inserts ledger rows, and its batch never
			// inserts a key twice itself (appendTx claims each key and
			// each (poll, principal) once): a concurrent append committed
			// the same key first, and the batch runs again (errRaced).
			return errConflict
		}
		return ErrExists
	case codeInsufficientPriv:
		if pgErr.TableName == "poll_events" || pgErr.Where != "" {
			return ErrAppendOnly // the append-only trigger's refusal
		}
		return ErrNotPermitted
	case codeSerializationFailure, codeDeadlockDetected:
		return errConflict
	case codeLockNotAvailable, codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow, codeTooManyConnections:
		return errRetryable
	case codeInvalidCatalogName:
		return errNoDatabase
	case codeInvalidAuthorization:
		return errLoginRefused
	case codeInvalidPassword:
		return errPasswordRefused
	}
	return nil // codeOutOfMemory among them: see kindOf
}

// isConnLost reports the errors below the protocol (refused, reset,
// closed, timed out), and those pgx returns once a connection died under a
// statement: transient from the ledger's point of view.
func isConnLost(err error) bool {
	var netErr net.Error
	var connErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) || pgconn.Timeout(err)
}

// interpretError translates an error from pgx into this package's errors,
// by kindOf. what says what was being done ("append batch").
func interpretError(what string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	errors.As(err, &pgErr)
	switch kind := kindOf(err); kind {
	case nil:
		if pgErr != nil && pgErr.Code == codeOutOfMemory {
			return fmt.Errorf("%s: %w (PostgreSQL ran out of memory or of room in its lock table: the batch is tried again in halves, as a smaller batch needs less; "+
				"if it keeps happening, raise the server's max_locks_per_transaction or look at what else holds its locks and memory)", what, err)
		}
		return fmt.Errorf("%s: %w", what, err)
	case ErrNotFound:
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	case ErrExists:
		return fmt.Errorf("%s: %w (%s)", what, ErrExists, pgErr.ConstraintName)
	case errConflict:
		if pgErr != nil && pgErr.Code == codeUniqueViolation { // a ledger key: see sqlstateKind
			return fmt.Errorf("%s: %w (%s): %w", what, errRaced, pgErr.ConstraintName, err)
		}
		return &kindError{fmt.Errorf("%s: %w", what, err), kind}
	case ErrAppendOnly:
		return fmt.Errorf("%s: %w: %s", what, ErrAppendOnly, pgErr.Message)
	case ErrNotPermitted:
		return fmt.Errorf("%s: %w: %s (grant the login tally_admin, docs/operations.md)", what, ErrNotPermitted, pgErr.Message)
	default:
		return &kindError{fmt.Errorf("%s: %w", what, err), kind}
	}
}
