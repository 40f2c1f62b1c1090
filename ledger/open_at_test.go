package ledger_test

import (
	"testing"
	"time"

	"tally/ledger"
)

// TestOpenAtAgreesWithSQL holds ledger.Poll.OpenAt and the statements'
// SQL function poll_open_at (migration 00018) to one rule: at each edge of
// the window, with and without a closing, they give the same answer, and
// the answer is the rule's.
func TestOpenAtAgreesWithSQL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opens := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	closes := opens.Add(time.Hour)
	µs := time.Microsecond
	cases := []struct {
		name   string
		closes *time.Time
		at     time.Time
		want   bool
	}{
		{"before the opening", &closes, opens.Add(-µs), false},
		{"at the opening", &closes, opens, true},
		{"inside", &closes, opens.Add(time.Minute), true},
		{"just before the closing", &closes, closes.Add(-µs), true},
		{"at the closing", &closes, closes, false},
		{"after the closing", &closes, closes.Add(µs), false},
		{"no closing, before the opening", nil, opens.Add(-µs), false},
		{"no closing, at the opening", nil, opens, true},
		{"no closing, years later", nil, opens.AddDate(30, 0, 0), true},
	}
	for _, c := range cases {
		p := ledger.Poll{OpensAt: opens, ClosesAt: c.closes}
		var sql bool
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT poll_open_at($1, $2, $3)`, opens, c.closes, c.at).Scan(&sql); err != nil {
			t.Fatal(err)
		}
		if got := p.OpenAt(c.at); got != c.want || sql != c.want {
			t.Errorf("%s: OpenAt says %v, poll_open_at says %v; the rule says %v", c.name, got, sql, c.want)
		}
	}
}
