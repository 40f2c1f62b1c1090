package intake_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestAdminCreatePollsBulk: POST /v1/polls with an array answers each
// poll as it would be answered alone, in the array's order, and the polls
// made take votes at the intake that answered at once; an array of none
// or of too many polls is refused whole.
func TestAdminCreatePollsBulk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, admin := b.admin(t, "app")
	body := `[` + strings.Join([]string{
		`{"poll_id":"n1","title":"New","choices":["y","n"]}`,
		`{"poll_id":"p1","title":"Lunch","choices":["a","b"]}`,
		`{"poll_id":"p1","title":"Dinner","choices":["a","b"]}`,
		`{"poll_id":"bad","title":"No choices"}`,
		`{"poll_id":"odd","title":"T","choices":["a"],"colour":"red"}`,
		`{"poll_id":"big","title":"T","choices":[` + idList("c", 1001) + `]}`,
		`{"poll_id":"rk","title":"T","choices":[` + idList("c", 17) + `],"ballot":{"kind":"ranked"}}`,
		`{"poll_id":"n2","title":"Also new","choices":["x"],"eligible":["` + b.who.ID + `"]}`,
	}, ",") + `]`
	r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, body)
	if r.code != http.StatusOK {
		t.Fatalf("bulk create: %d %s", r.code, r.raw)
	}
	want := []struct {
		id     string
		status int
		detail string
	}{
		{"n1", 201, ""}, {"p1", 200, ""}, {"p1", 409, "another title"}, {"bad", 400, `"choices"`},
		{"odd", 400, `"colour"`}, {"big", 422, "over its limit of 1000"}, {"rk", 422, "at most 16"}, {"n2", 201, ""},
	}
	polls, _ := r.body["polls"].([]any)
	if len(polls) != len(want) {
		t.Fatalf("%d answers for %d polls: %s", len(polls), len(want), r.raw)
	}
	for i, w := range want {
		got := polls[i].(map[string]any)
		if got["poll_id"] != w.id || got["status"] != float64(w.status) {
			t.Errorf("poll %d: %v, want %s %d", i, got, w.id, w.status)
		}
		detail, _ := got["detail"].(string)
		if (w.detail == "") != (detail == "") || !strings.Contains(detail, w.detail) {
			t.Errorf("poll %d: detail %q, want one with %q", i, detail, w.detail)
		}
		if typ, _ := got["type"].(string); (w.status >= 400) != strings.HasPrefix(typ, "urn:tally:problem:") {
			t.Errorf("poll %d: type %q", i, typ)
		}
	}
	wantAcceptedCode(t, b.vote(t, b.token, "v1", "n1", "y"))
	wantAcceptedCode(t, b.vote(t, b.token, "v2", "n2", "x"))
	for what, body := range map[string]string{
		"none":     `[]`,
		"too many": `[` + strings.Repeat(`{},`, 1000) + `{}]`,
		"not JSON": `[{"poll_id":`,
	} {
		if r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, body); r.code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", what, r.code, r.raw)
		}
	}
}

func wantAcceptedCode(t *testing.T, r reply) {
	t.Helper()
	if r.code != http.StatusAccepted {
		t.Fatalf("vote on a poll made in bulk: %d %s, want 202", r.code, r.raw)
	}
}
