package ledger

import (
	"errors"
	"io"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestInterpretError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		retryable bool
		is        error
	}{
		{"race lost to a concurrent append", errRaced, true, errRaced},
		{"deadlock", &pgconn.PgError{Code: codeDeadlockDetected}, true, nil},
		{"serialization failure", &pgconn.PgError{Code: codeSerializationFailure}, true, nil},
		{"server shutting down", &pgconn.PgError{Code: codeAdminShutdown}, true, nil},
		{"connection closed", pgconn.ErrConnClosed, true, nil},
		{"connection cut mid-reply", io.ErrUnexpectedEOF, true, nil},
		{"unique violation", &pgconn.PgError{Code: codeUniqueViolation}, false, ErrExists},
		{"no rows", pgx.ErrNoRows, false, ErrNotFound},
		{"append-only trigger", &pgconn.PgError{Code: codeInsufficientPriv, TableName: "poll_events"}, false, ErrAppendOnly},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := interpretError("op", tc.err)
			if IsRetryable(err) != tc.retryable {
				t.Errorf("IsRetryable(%v) = %v, want %v", err, !tc.retryable, tc.retryable)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v is not %v", err, tc.is)
			}
			if !errors.Is(err, tc.err) && tc.is == nil {
				t.Errorf("%v lost its cause %v", err, tc.err)
			}
		})
	}
}
