package intake_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"tally/ledger"
)

// TestAdminCreatePollsAtLimit: POST /v1/polls with an array of one poll
// more than the stated most (ledger.MaxPollsPerCreate, 1,000 in the
// docs) is refused 400 naming that most, and makes none of them; an array
// of exactly the most makes every poll (201 each) in one transaction:
// every row of polls it wrote carries the same transaction id (xmin).
func TestAdminCreatePollsAtLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, admin := b.admin(t, "app")
	ctx := context.Background()
	const most = 1000
	if ledger.MaxPollsPerCreate != most {
		t.Fatalf("ledger.MaxPollsPerCreate is %d, the docs say %d", ledger.MaxPollsPerCreate, most)
	}
	array := func(prefix string, n int) string {
		polls := make([]string, n)
		for i := range polls {
			polls[i] = fmt.Sprintf(`{"poll_id":"%s-%04d","title":"T","choices":["a","b"]}`, prefix, i)
		}
		return "[" + strings.Join(polls, ",") + "]"
	}
	made := func(prefix string) (rows, txs int) {
		t.Helper()
		if err := b.db.Pool.QueryRow(ctx, `
SELECT count(*), count(DISTINCT xmin::text) FROM polls WHERE starts_with(id, $1)`, prefix+"-").Scan(&rows, &txs); err != nil {
			t.Fatal(err)
		}
		return rows, txs
	}

	r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, array("over", most+1))
	if r.code != http.StatusBadRequest || !strings.Contains(r.str("detail"), fmt.Sprint(most)) {
		t.Errorf("an array of %d polls: %d %.300s, want 400 naming the most, %d", most+1, r.code, r.raw, most)
	}
	if rows, _ := made("over"); rows != 0 {
		t.Errorf("an array of %d polls, refused, made %d of them", most+1, rows)
	}

	r = b.adminDo(t, http.MethodPost, "/v1/polls", admin, array("most", most))
	if r.code != http.StatusOK {
		t.Fatalf("an array of %d polls: %d %.300s, want 200", most, r.code, r.raw)
	}
	polls, _ := r.body["polls"].([]any)
	if len(polls) != most {
		t.Fatalf("an array of %d polls answered for %d", most, len(polls))
	}
	for i, p := range polls {
		if p := p.(map[string]any); p["status"] != float64(http.StatusCreated) || p["poll_id"] != fmt.Sprintf("most-%04d", i) {
			t.Fatalf("poll %d of the array: %v, want most-%04d 201", i, p, i)
		}
	}
	if rows, txs := made("most"); rows != most || txs != 1 {
		t.Errorf("an array of %d polls made %d polls in %d transactions, want %d in one", most, rows, txs, most)
	}
}
