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
	// tried again: deadlocks, serialization failures, lost connections.
	errRetryable = errors.New("retryable")
)

// IsRetryable reports whether err is transient: trying the same work again
// may succeed (a deadlock, a serialization failure, a connection lost or
// refused, a server shutting down). When a commit's answer was lost the
// outcome is uncertain, but a retry of Append is still safe: the ledger
// answers duplicate for what already committed.
func IsRetryable(err error) bool {
	return errors.Is(err, errRetryable)
}

type retryableError struct{ err error }

func (e *retryableError) Error() string        { return e.err.Error() }
func (e *retryableError) Unwrap() []error      { return []error{e.err, errRetryable} }
func (e *retryableError) Is(target error) bool { return target == errRetryable }

// SQLSTATE codes interpretError knows.
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeInsufficientPriv     = "42501"
	codeLockNotAvailable     = "55P03"
	codeAdminShutdown        = "57P01"
	codeCrashShutdown        = "57P02"
	codeCannotConnectNow     = "57P03"
	codeTooManyConnections   = "53300"
)

// interpretError translates an error from pgx into this package's errors.
// what says what was being done ("append batch").
func interpretError(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	if errors.Is(err, errRaced) || errors.Is(err, errRedefined) {
		return &retryableError{fmt.Errorf("%s: %w", what, err)}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeUniqueViolation:
			return fmt.Errorf("%s: %w (%s)", what, ErrExists, pgErr.ConstraintName)
		case codeInsufficientPriv:
			if pgErr.TableName == "poll_events" || pgErr.Where != "" {
				return fmt.Errorf("%s: %w: %s", what, ErrAppendOnly, pgErr.Message)
			}
			return fmt.Errorf("%s: %w: %s (grant the login tally_admin, docs/operations.md)", what, ErrNotPermitted, pgErr.Message)
		case codeSerializationFailure, codeDeadlockDetected, codeLockNotAvailable,
			codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow, codeTooManyConnections:
			return &retryableError{fmt.Errorf("%s: %w", what, err)}
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	// Anything below the protocol (refused, reset, closed, timed out) is
	// transient from the ledger's point of view.
	var netErr net.Error
	var connErr *pgconn.ConnectError
	if errors.As(err, &netErr) || errors.As(err, &connErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, net.ErrClosed) || isConnClosed(err) {
		return &retryableError{fmt.Errorf("%s: %w", what, err)}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isConnClosed reports the errors pgx returns once a connection died under
// a statement.
func isConnClosed(err error) bool {
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		pgconn.Timeout(err)
}
