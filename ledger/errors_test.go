package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
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
		{"ledger key taken by a concurrent append", &pgconn.PgError{Code: codeUniqueViolation, TableName: "poll_events"}, true, errRaced},
		{"no rows", pgx.ErrNoRows, false, ErrNotFound},
		{"append-only trigger", &pgconn.PgError{Code: codeInsufficientPriv, TableName: "poll_events"}, false, ErrAppendOnly},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false, nil},
		{"too many connections", &pgconn.PgError{Code: codeTooManyConnections}, true, nil},
		// The same batch asks for the same locks again: see kindOf.
		{"lock table full", &pgconn.PgError{Code: codeOutOfMemory, Message: "out of shared memory"}, false, nil},
		{"database missing", &pgconn.PgError{Code: codeInvalidCatalogName}, false, errNoDatabase},
		{"role refused", &pgconn.PgError{Code: codeInvalidAuthorization}, false, errLoginRefused},
		{"password refused", &pgconn.PgError{Code: codeInvalidPassword}, false, errPasswordRefused},
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

// TestKinds: each predicate answers for pgx's own error and for the error
// interpretError made of it (wrapped again by a caller), and for no other
// kind; a conflict is retryable, and only a conflict is run again by runTx.
func TestKinds(t *testing.T) {
	preds := map[string]func(error) bool{
		"IsRetryable": IsRetryable, "isConflict": isConflict, "IsMissingDatabase": IsMissingDatabase,
		"IsLoginRefused": IsLoginRefused, "IsPasswordRefused": IsPasswordRefused,
	}
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{&pgconn.PgError{Code: codeDeadlockDetected}, []string{"IsRetryable", "isConflict"}},
		{errRedefined, []string{"IsRetryable", "isConflict"}},
		{&pgconn.PgError{Code: codeUniqueViolation, TableName: "poll_events"}, []string{"IsRetryable", "isConflict"}},
		{&pgconn.PgError{Code: codeCannotConnectNow}, []string{"IsRetryable"}},
		{io.EOF, []string{"IsRetryable"}},
		{&pgconn.PgError{Code: codeInvalidCatalogName}, []string{"IsMissingDatabase"}},
		{&pgconn.PgError{Code: codeInvalidAuthorization}, []string{"IsLoginRefused"}},
		{&pgconn.PgError{Code: codeInvalidPassword}, []string{"IsPasswordRefused"}},
		{&pgconn.PgError{Code: codeOutOfMemory}, nil},
		{context.DeadlineExceeded, nil},
		{fmt.Errorf("ping: %w", context.Canceled), nil},
		{nil, nil},
	} {
		for _, err := range []error{tc.err, interpretError("op", tc.err), fmt.Errorf("caller: %w", interpretError("op", tc.err))} {
			for name, pred := range preds {
				if got, want := pred(err), slices.Contains(tc.want, name); got != want {
					t.Errorf("%s(%v) = %v, want %v", name, err, got, want)
				}
			}
		}
	}
}

// TestOutOfMemoryHint: out of memory (the lock table full) says what to do.
func TestOutOfMemoryHint(t *testing.T) {
	err := interpretError("append batch", &pgconn.PgError{Severity: "ERROR", Code: codeOutOfMemory, Message: "out of shared memory"})
	for _, w := range []string{"append batch: ", "out of shared memory", "smaller batch", "max_locks_per_transaction"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
}
