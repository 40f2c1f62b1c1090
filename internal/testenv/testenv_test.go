package testenv

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestWithDatabase(t *testing.T) {
	for _, dsn := range []string{
		"postgres://postgres@127.0.0.1:5432/tally",
		"postgresql://u:p%40ss%2Fw%3Ard@[::1]:5433/tally?sslmode=disable&application_name=x",
		"postgres://u@h1:5432,h2:5433/tally?target_session_attrs=read-write",
		"host=127.0.0.1 port=5432 user=postgres dbname=tally password='a b'",
		"host=/run/postgresql user=postgres",
	} {
		before, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		got := withDatabase(dsn, "t_other")
		after, err := pgconn.ParseConfig(got)
		if err != nil {
			t.Fatalf("withDatabase(%q) = %q, which pgx cannot parse: %v", dsn, got, err)
		}
		if after.Database != "t_other" {
			t.Errorf("withDatabase(%q) = %q: database %q, want t_other", dsn, got, after.Database)
		}
		if after.User != before.User || after.Password != before.Password || after.Host != before.Host ||
			after.Port != before.Port || len(after.Fallbacks) != len(before.Fallbacks) ||
			after.RuntimeParams["application_name"] != before.RuntimeParams["application_name"] {
			t.Errorf("withDatabase(%q) = %q changed more than the database", dsn, got)
		}
	}
}
