package intake_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/ledger"
)

// This file tests a poll's ballot and answers mode on the admin routes:
// created with each kind, refused 422 invalid-definition naming the field
// for each rule a definition breaks, read back by admins and by the
// voters who may vote on it.

// TestAdminCreateBallotKinds: a poll of each kind is created with its
// ballot and answers mode, answered with every parameter of its kind
// (defaults filled in), the same again is 200, another ballot or answers
// mode 409 naming the field; and it takes ballots of its kind at once.
func TestAdminCreateBallotKinds(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.ReadRate, c.ReadBurst = 1000, 1000 }) // many admin requests
	_, admin := b.admin(t, "app")
	const choices = `"choices":["a","b","c"]`
	cases := []struct {
		id, ballot, answers string
		want                []string // in the answer
		vote                string   // a valid ballot
	}{
		{"k-single", ``, ``, []string{`"ballot":{"kind":"single"}`, `"answers":"final"`}, `"a"`},
		{"k-multi", `{"kind":"multiple","min_choices":1,"max_choices":2}`, `"latest"`, []string{`"ballot":{"kind":"multiple","min_choices":1,"max_choices":2}`, `"answers":"latest"`}, `["b","a"]`},
		{"k-multi-def", `{"kind":"multiple"}`, ``, []string{`"ballot":{"kind":"multiple","min_choices":1,"max_choices":3}`}, `["a","b","c"]`},
		{"k-appr", `{"kind":"approve"}`, `"final"`, []string{`"ballot":{"kind":"approve"}`, `"answers":"final"`}, `{"a":"yes"}`},
		{"k-score", `{"kind":"score","max_score":5,"budget":7}`, ``, []string{`"ballot":{"kind":"score","max_score":5,"budget":7}`}, `{"a":5,"b":2}`},
		{"k-score-nb", `{"kind":"score","max_score":10}`, ``, []string{`"ballot":{"kind":"score","max_score":10}`}, `{"a":10,"b":10,"c":10}`},
		{"k-rank", `{"kind":"ranked"}`, ``, []string{`"ballot":{"kind":"ranked"}`}, `["c","a"]`},
	}
	for _, tc := range cases {
		body := `{"poll_id":"` + tc.id + `","title":"T",` + choices
		if tc.ballot != "" {
			body += `,"ballot":` + tc.ballot
		}
		if tc.answers != "" {
			body += `,"answers":` + tc.answers
		}
		body += `}`
		r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, body)
		if r.code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", tc.id, r.code, r.raw)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.raw, w) {
				t.Errorf("create %s answered %s, want it to contain %s", tc.id, r.raw, w)
			}
		}
		if again := b.adminDo(t, http.MethodPost, "/v1/polls", admin, body); again.code != http.StatusOK {
			t.Errorf("create %s again: %d %s, want 200", tc.id, again.code, again.raw)
		}
		if r := b.voteBallot(t, "e-"+tc.id, tc.id, tc.vote); r.code != http.StatusAccepted {
			t.Errorf("a ballot %s on %s right after its creation: %d %s", tc.vote, tc.id, r.code, r.raw)
		}
		if r := b.adminDo(t, http.MethodGet, "/v1/polls/"+tc.id, admin, ""); r.code != http.StatusOK || !strings.Contains(r.raw, tc.want[0]) {
			t.Errorf("GET /v1/polls/%s: %d %s, want %s", tc.id, r.code, r.raw, tc.want[0])
		}
	}
	list := b.adminDo(t, http.MethodGet, "/v1/polls", admin, "")
	if list.code != http.StatusOK || !strings.Contains(list.raw, `"ballot":{"kind":"score","max_score":5,"budget":7},"answers":"final"`) {
		t.Errorf("GET /v1/polls: %d %s, want each poll's ballot and answers", list.code, list.raw)
	}
	for field, body := range map[string]string{
		"ballot":  `{"poll_id":"k-multi","title":"T",` + choices + `,"ballot":{"kind":"multiple","min_choices":1,"max_choices":3},"answers":"latest"}`,
		"answers": `{"poll_id":"k-multi","title":"T",` + choices + `,"ballot":{"kind":"multiple","min_choices":1,"max_choices":2}}`,
		"kind":    `{"poll_id":"k-appr","title":"T",` + choices + `,"ballot":{"kind":"ranked"}}`,
	} {
		r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, body)
		wantProblemType(t, r, http.StatusConflict, "poll-exists")
		if !strings.Contains(r.str("detail"), "another ") {
			t.Errorf("a create differing in %s: detail %q, want the field named", field, r.str("detail"))
		}
	}
}

// TestAdminCreateBallotRefused: each rule a definition breaks, and each
// stated limit of a poll (choices, eligible), answers 422
// invalid-definition naming the field and the limit; nothing is stored.
func TestAdminCreateBallotRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.ReadRate, c.ReadBurst = 1000, 1000 }) // 22 admin requests, past the default burst
	_, admin := b.admin(t, "app")
	const head = `{"poll_id":"bad","title":"T","choices":["a","b","c"]`
	many := `"c0"`
	for i := 1; i < 17; i++ {
		many += `,"c` + string(rune('a'+i)) + `"`
	}
	cases := []struct {
		name, body, field, detail string
	}{
		{"unknown kind", head + `,"ballot":{"kind":"borda"}}`, "ballot.kind", `"borda" is not known`},
		{"no kind", head + `,"ballot":{"max_choices":2}}`, "ballot.kind", "has no kind"},
		{"min above max", head + `,"ballot":{"kind":"multiple","min_choices":3,"max_choices":2}}`, "ballot.min_choices", "above max_choices (2)"},
		{"max above choices", head + `,"ballot":{"kind":"multiple","max_choices":4}}`, "ballot.max_choices", "more than the poll's 3 choices"},
		{"max zero", head + `,"ballot":{"kind":"multiple","max_choices":0}}`, "ballot.max_choices", "at least 1"},
		{"min negative", head + `,"ballot":{"kind":"multiple","min_choices":-1}}`, "ballot.min_choices", "0 (an empty ballot abstains) or more"},
		{"no max_score", head + `,"ballot":{"kind":"score"}}`, "ballot.max_score", "needs max_score"},
		{"max_score zero", head + `,"ballot":{"kind":"score","max_score":0}}`, "ballot.max_score", "1 to 1000000"},
		{"max_score too high", head + `,"ballot":{"kind":"score","max_score":1000001}}`, "ballot.max_score", "1 to 1000000"},
		{"budget zero", head + `,"ballot":{"kind":"score","max_score":3,"budget":0}}`, "ballot.budget", "1 to 1073741824"},
		{"parameter of another kind", head + `,"ballot":{"kind":"multiple","max_score":3}}`, "ballot.max_score", "a parameter of score ballots"},
		{"parameter on ranked", head + `,"ballot":{"kind":"ranked","max_choices":2}}`, "ballot.max_choices", "not of ranked ones"},
		{"unknown answers", head + `,"answers":"sometimes"}`, "answers", `"sometimes" is not known`},
		{"ranked too many choices", `{"poll_id":"bad","title":"T","choices":[` + many + `],"ballot":{"kind":"ranked"}}`, "choices", "at most 16"},
		{"over the limit of choices", `{"poll_id":"bad","title":"T","choices":[` + idList("c", ledger.MaxChoices+1) + `]}`,
			"choices", "over its limit of 1000"},
		{"over the limit of eligible", head + `,"eligible":[` + idList("p-", ledger.MaxEligible+1) + `]}`,
			"eligible", "over its limit of 100000"},
	}
	for _, tc := range cases {
		r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, tc.body)
		if r.code != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %s, want 422", tc.name, r.code, r.raw)
			continue
		}
		wantProblemType(t, r, http.StatusUnprocessableEntity, "invalid-definition")
		if d := r.str("detail"); !strings.Contains(d, `"`+tc.field+`"`) || !strings.Contains(d, tc.detail) {
			t.Errorf("%s: detail %q, want the field %q and %q", tc.name, d, tc.field, tc.detail)
		}
	}
	for what, body := range map[string]string{
		"a key in another case": head + `,"ballot":{"Kind":"ranked"}}`,
		"a key twice":           head + `,"ballot":{"kind":"ranked","kind":"ranked"}}`,
		"an unknown key":        head + `,"ballot":{"kind":"ranked","depth":2}}`,
		"a wrong type":          head + `,"ballot":{"kind":"score","max_score":"3"}}`,
		"a ballot not object":   head + `,"ballot":"ranked"}`,
	} {
		if r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, body); r.code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", what, r.code, r.raw)
		}
	}
	if r := b.adminDo(t, http.MethodGet, "/v1/polls/bad", admin, ""); r.code != http.StatusNotFound {
		t.Fatalf("a refused create stored poll bad: %d %s", r.code, r.raw)
	}
}

// TestVoterReadsPoll: a voter reads a poll it may vote on, with its
// ballot and answers mode but no eligibility list or total; a restricted
// poll it is not on, and an unknown one, answer the same 404. An admin
// reads the list and the total.
func TestVoterReadsPoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, admin := b.admin(t, "app")
	_, outsiderToken := b.signed(t, "outsider", time.Time{})
	for _, body := range []string{
		`{"poll_id":"open","title":"Open","choices":["a","b","c"],"ballot":{"kind":"score","max_score":4},"answers":"latest"}`,
		`{"poll_id":"listed","title":"Listed","choices":["a","b"],"eligible":["` + b.who.ID + `"],"ballot":{"kind":"ranked"}}`,
	} {
		if r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, body); r.code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.code, r.raw)
		}
	}
	r := b.adminDo(t, http.MethodGet, "/v1/polls/open", b.token, "")
	if r.code != http.StatusOK || !strings.Contains(r.raw, `"ballot":{"kind":"score","max_score":4},"answers":"latest"`) ||
		!strings.Contains(r.raw, `"choices":["a","b","c"]`) || r.body["total"] != nil {
		t.Fatalf("a voter's read: %d %s", r.code, r.raw)
	}
	r = b.adminDo(t, http.MethodGet, "/v1/polls/listed", b.token, "")
	if r.code != http.StatusOK || r.str("eligibility") != "list" || r.body["eligible"] != nil || !strings.Contains(r.raw, `"ballot":{"kind":"ranked"}`) {
		t.Fatalf("a listed voter's read: %d %s, want the poll without its list", r.code, r.raw)
	}
	hidden := b.adminDo(t, http.MethodGet, "/v1/polls/listed", outsiderToken, "")
	unknown := b.adminDo(t, http.MethodGet, "/v1/polls/nope", outsiderToken, "")
	wantProblemType(t, hidden, http.StatusNotFound, "unknown-poll")
	wantProblemType(t, unknown, http.StatusNotFound, "unknown-poll")
	if strings.ReplaceAll(hidden.str("detail"), "listed", "X") != strings.ReplaceAll(unknown.str("detail"), "nope", "X") {
		t.Fatalf("a hidden poll's 404 %q differs from an unknown one's %q", hidden.str("detail"), unknown.str("detail"))
	}
	if r := b.adminDo(t, http.MethodGet, "/v1/polls/listed", admin, ""); r.code != http.StatusOK || r.body["eligible"] == nil || r.body["total"] == nil {
		t.Fatalf("an admin's read: %d %s, want the list and the total", r.code, r.raw)
	}
}

// idList is n JSON strings prefix0, prefix1, ... joined by commas.
func idList(prefix string, n int) string {
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`"` + prefix + strconv.Itoa(i) + `"`)
	}
	return sb.String()
}
