package intake_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/credential"
	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// This file tests the admin routes: who may use them, the idempotent
// repeats, the validation that names the field, and a poll's life over
// HTTP (create, vote, close) with what admin_actions records of it.

// TestAdminRoutesWhoMay sends each admin route with no token (401), a
// voter's (403, and nothing changes; a poll's read, which a voter may
// make of a poll it may vote on, 404 for the poll not created) and an
// admin's.
func TestAdminRoutesWhoMay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, voter := b.signed(t, "voter", time.Time{})
	_, admin := b.admin(t, "app")
	target, _ := b.signed(t, "target", time.Time{})
	routes := []struct {
		method, path, body string
		admin              int
	}{
		{http.MethodPost, "/v1/polls", `{"poll_id":"new","title":"New?","choices":["x","y"]}`, http.StatusCreated},
		{http.MethodGet, "/v1/polls", "", http.StatusOK},
		{http.MethodGet, "/v1/polls/new", "", http.StatusOK}, // a voter's: 404, below
		{http.MethodPost, "/v1/polls/new/close", "", http.StatusOK},
		{http.MethodPost, "/v1/principals", `{"names":["ann","bob"]}`, http.StatusCreated},
		{http.MethodGet, "/v1/principals", "", http.StatusOK},
		{http.MethodPost, "/v1/principals/" + target.ID + "/revoke", "", http.StatusOK},
	}
	for _, rt := range routes {
		if r := b.adminDo(t, rt.method, rt.path, "", rt.body); r.code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d %s, want 401", rt.method, rt.path, r.code, r.raw)
		}
		r := b.adminDo(t, rt.method, rt.path, voter, rt.body)
		if rt.method == http.MethodGet && rt.path == "/v1/polls/new" {
			wantProblemType(t, r, http.StatusNotFound, "unknown-poll")
			continue
		}
		wantProblemType(t, r, http.StatusForbidden, "forbidden")
		if !strings.Contains(r.str("detail"), "tally principal add, as admins") {
			t.Errorf("a voter's 403 says %q; want it to name how an admin token is issued", r.str("detail"))
		}
	}
	if _, err := b.store.Poll(context.Background(), "new"); err == nil {
		t.Fatal("a voter's POST /v1/polls created the poll")
	}
	if p, _ := b.store.Principal(context.Background(), target.ID); p.RevokedAt != nil {
		t.Fatal("a voter's revoke revoked the principal")
	}
	for _, rt := range routes {
		if r := b.adminDo(t, rt.method, rt.path, admin, rt.body); r.code != rt.admin {
			t.Errorf("%s %s as an admin: %d %s, want %d", rt.method, rt.path, r.code, r.raw, rt.admin)
		}
	}
}

// TestAdminCreatePollRepeats: the same definition again answers 200, any
// field changed 409 poll-exists naming it, and an invalid one 400 naming
// the field, changing nothing.
func TestAdminCreatePollRepeats(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.ReadRate, c.ReadBurst = 1000, 1000 }) // many admin requests
	_, admin := b.admin(t, "app")
	const def = `"poll_id":"topic","title":"Next topic?","choices":["api","cli"],"closes_at":"2030-01-01T00:00:00Z"`
	r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, `{`+def+`}`)
	if r.code != http.StatusCreated || r.header.Get("Location") != "/v1/polls/topic" {
		t.Fatalf("create: %d Location %q %s, want 201 with Location /v1/polls/topic", r.code, r.header.Get("Location"), r.raw)
	}
	if r.str("state") != "open" || r.str("poll_id") != "topic" {
		t.Fatalf("create answered %s", r.raw)
	}
	if again := b.adminDo(t, http.MethodPost, "/v1/polls", admin, `{`+def+`}`); again.code != http.StatusOK || again.header.Get("Location") != "" {
		t.Fatalf("the same create again: %d %s, want 200 without Location", again.code, again.raw)
	}
	for field, body := range map[string]string{
		"title":          `{"poll_id":"topic","title":"Other?","choices":["api","cli"],"closes_at":"2030-01-01T00:00:00Z"}`,
		"choices":        `{"poll_id":"topic","title":"Next topic?","choices":["cli","api"],"closes_at":"2030-01-01T00:00:00Z"}`,
		"closes_at":      `{"poll_id":"topic","title":"Next topic?","choices":["api","cli"]}`,
		"eligible":       `{` + def + `,"eligible":["p-1"]}`,
		"public_results": `{` + def + `,"public_results":true}`,
	} {
		r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, body)
		wantProblemType(t, r, http.StatusConflict, "poll-exists")
		if !strings.Contains(r.str("detail"), "another "+field) {
			t.Errorf("a create differing in %s: detail %q, want it named", field, r.str("detail"))
		}
	}
	for field, body := range map[string]string{
		"poll_id":   `{"poll_id":"bad id","title":"T","choices":["a"]}`,
		"title":     `{"poll_id":"t2","title":"","choices":["a"]}`,
		"choices":   `{"poll_id":"t2","title":"T","choices":["a","a"]}`,
		"eligible":  `{"poll_id":"t2","title":"T","choices":["a"],"eligible":["no good"]}`,
		"opens_at":  `{"poll_id":"t2","title":"T","choices":["a"],"opens_at":"tomorrow"}`,
		"closes_at": `{"poll_id":"t2","title":"T","choices":["a"],"opens_at":"2030-01-02T00:00:00Z","closes_at":"2030-01-01T00:00:00Z"}`,
	} {
		r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, body)
		wantProblemType(t, r, http.StatusBadRequest, "invalid-request")
		if !strings.Contains(r.str("detail"), `"`+field+`"`) {
			t.Errorf("an invalid %s: detail %q, want the field named", field, r.str("detail"))
		}
	}
	for what, body := range map[string]string{
		"an unknown key":  `{"poll_id":"t2","title":"T","choices":["a"],"colour":"red"}`,
		"a wrong type":    `{"poll_id":"t2","title":"T","choices":"a"}`,
		"trailing data":   `{"poll_id":"t2","title":"T","choices":["a"]} {}`,
		"not JSON":        `poll_id=t2`,
		"an empty object": `{}`,
	} {
		if r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, body); r.code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", what, r.code, r.raw)
		}
	}
	if _, err := b.store.Poll(context.Background(), "t2"); err == nil {
		t.Fatal("a refused create stored poll t2")
	}
}

// POST /v1/polls refuses, naming the field, what the audit of the poll's
// log could not read alike: a title whose JSON text readers decode
// differently, a time before 1970.
func TestAdminCreatePollAuditable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, admin := b.admin(t, "app")
	// A time before 1970, the zero time among them, is refused: the audit
	// reads none (and the zero time must not be taken for "now").
	for _, at := range []string{"1969-12-31T23:59:59Z", "0001-01-01T00:00:00Z"} {
		r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, `{"poll_id":"t2","title":"T","choices":["a"],"opens_at":"`+at+`"}`)
		wantProblemType(t, r, http.StatusBadRequest, "invalid-request")
		if !strings.Contains(r.str("detail"), `"opens_at"`) || !strings.Contains(r.str("detail"), "before 1970") {
			t.Errorf("opens_at %s: detail %q, want the field and 1970 named", at, r.str("detail"))
		}
	}
	// A title whose JSON text readers decode differently (most replace a
	// byte that is not UTF-8, or a lone surrogate, with U+FFFD) is refused.
	for what, title := range map[string]string{
		"a lone high surrogate":    `"Lunch \ud800?"`,
		"a lone low surrogate":     `"Lunch \udc00?"`,
		"a high surrogate last":    `"Lunch \ud83d"`,
		"a byte that is not UTF":   "\"Lunch \xff?\"",
		"a title that is a number": `7`,
	} {
		r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, `{"poll_id":"t2","title":`+title+`,"choices":["a"]}`)
		wantProblemType(t, r, http.StatusBadRequest, "invalid-request")
		if !strings.Contains(r.str("detail"), `"title"`) {
			t.Errorf("a title with %s: detail %q, want the field named", what, r.str("detail"))
		}
	}
	if r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, `{"poll_id":"t3","title":"Lunch \ud83c\udf5c \\ud800?","choices":["a"]}`); r.code != http.StatusCreated ||
		r.str("title") != "Lunch \U0001f35c \\ud800?" {
		t.Errorf("a title with a surrogate pair and an escaped backslash before ud800: %d %s, want 201 with the title decoded", r.code, r.raw)
	}
}

// TestAdminPollLife creates a poll over HTTP, votes on it, closes it (a
// new vote is then refused, a retry still accepted), reads it back, and
// finds each action in admin_actions under the admin's id.
func TestAdminPollLife(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runProjector(t, b)
	ctx := context.Background()
	who, admin := b.admin(t, "app")
	_, voter := b.signed(t, "voter", time.Time{})
	if r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, `{"poll_id":"lunch","title":"Lunch?","choices":["pizza","sushi"]}`); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	// The intake that answered 201 takes votes on the poll at once.
	wantAccepted(t, b.vote(t, voter, "v1", "lunch", "sushi"), "v1", ledger.StatusPending)
	testenv.Eventually(t, 10*time.Second, "the vote on the poll created over HTTP recorded", func() bool {
		return b.status(t, voter, "v1").str("status") == "recorded"
	})

	_, late := b.signed(t, "late", time.Time{})
	wantAccepted(t, b.vote(t, late, "l1", "lunch", "pizza"), "l1", ledger.StatusPending)
	r := b.adminDo(t, http.MethodPost, "/v1/polls/lunch/close", admin, "")
	if r.code != http.StatusOK || r.str("state") != "closed" {
		t.Fatalf("close: %d %s", r.code, r.raw)
	}
	closedAt := r.str("closes_at")
	if again := b.adminDo(t, http.MethodPost, "/v1/polls/lunch/close", admin, `{"at":"2031-01-01T00:00:00Z"}`); again.code != http.StatusOK || again.str("closes_at") != closedAt {
		t.Fatalf("close again, later: %d %s, want 200 keeping closes_at %s", again.code, again.raw, closedAt)
	}
	_, newcomer := b.signed(t, "newcomer", time.Time{})
	testenv.Eventually(t, 10*time.Second, "a new vote on the closed poll refused", func() bool {
		return b.vote(t, newcomer, "n1", "lunch", "pizza").code == http.StatusUnprocessableEntity
	})
	wantProblemType(t, b.vote(t, newcomer, "n2", "lunch", "pizza"), http.StatusUnprocessableEntity, "poll-closed")
	if r := b.vote(t, late, "l1", "lunch", "pizza"); r.code != http.StatusAccepted {
		t.Fatalf("a retry of a vote accepted before the close: %d %s, want 202", r.code, r.raw)
	}

	got := b.adminDo(t, http.MethodGet, "/v1/polls/lunch", admin, "")
	if got.code != http.StatusOK || got.str("title") != "Lunch?" || got.str("state") != "closed" {
		t.Fatalf("GET /v1/polls/lunch: %d %s", got.code, got.raw)
	}
	list := b.adminDo(t, http.MethodGet, "/v1/polls", admin, "")
	polls, _ := list.body["polls"].([]any)
	if list.code != http.StatusOK || len(polls) != 2 {
		t.Fatalf("GET /v1/polls: %d %s, want p1 and lunch", list.code, list.raw)
	}
	if r := b.adminDo(t, http.MethodPost, "/v1/polls/nope/close", admin, ""); r.code != http.StatusNotFound {
		t.Fatalf("close of an unknown poll: %d %s, want 404", r.code, r.raw)
	}

	acts, err := b.store.AdminActions(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var byAdmin []string
	for _, a := range acts {
		if a.PrincipalID == who.ID {
			byAdmin = append(byAdmin, a.Action+" "+a.Target)
		}
	}
	if want := []string{"poll.create lunch", "poll.close lunch"}; !slices.Equal(byAdmin, want) {
		t.Fatalf("admin_actions by the admin: %v, want %v (the second close changed nothing)", byAdmin, want)
	}
	var defs, closed int
	if err := b.db.Pool.QueryRow(ctx, `SELECT count(*), count(closes_at) FROM poll_definitions WHERE poll_id = 'lunch'`).
		Scan(&defs, &closed); err != nil {
		t.Fatal(err)
	}
	if defs != 2 || closed != 1 {
		t.Fatalf("poll lunch's log holds %d definitions, %d with a closing time; want the created one and the closed one", defs, closed)
	}
}

// TestAdminPrincipalsRefused: a POST /v1/principals with a field wrong
// answers 400 naming it and adds nobody; a role and an expiry given are
// in the tokens issued.
func TestAdminPrincipalsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, admin := b.admin(t, "app")
	before, err := b.store.Principals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for field, body := range map[string]string{
		"names":   `{"names":[]}`,
		"role":    `{"names":["x"],"role":"boss"}`,
		"expires": `{"names":["x"],"expires":"yesterday"}`,
	} {
		r := b.adminDo(t, http.MethodPost, "/v1/principals", admin, body)
		wantProblemType(t, r, http.StatusBadRequest, "invalid-request")
		if !strings.Contains(r.str("detail"), `"`+field+`"`) {
			t.Errorf("an invalid %s: detail %q, want the field named", field, r.str("detail"))
		}
	}
	if after, err := b.store.Principals(ctx); err != nil || len(after) != len(before) {
		t.Fatalf("refused requests added principals: %d before, %d after (%v)", len(before), len(after), err)
	}
	r := b.adminDo(t, http.MethodPost, "/v1/principals", admin, `{"names":["ops"],"role":"admin","expires":"1h"}`)
	wantProblemType(t, r, http.StatusForbidden, "forbidden")
	if !strings.Contains(r.str("detail"), "tally principal add, as admins") {
		t.Errorf("adding an admin over HTTP by default: detail %q, want it to say how admins are added", r.str("detail"))
	}
	if after, err := b.store.Principals(ctx); err != nil || len(after) != len(before) {
		t.Fatalf("a refused admin was added: %d principals before, %d after (%v)", len(before), len(after), err)
	}
}

// TestAdminAddsAdmins: with Config.AddAdminsOverHTTP an admin adds admins,
// whose tokens expire no later than its own: an admin whose token expires
// in an hour gets admins that expire then, whatever expiry it asks for
// (none, or later); one asked to expire sooner does; the token works.
func TestAdminAddsAdmins(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.AddAdminsOverHTTP = true })
	ps, err := b.store.AddPrincipals(context.Background(), []string{"ops-lead"}, ledger.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	creatorExpiry := time.Now().Add(time.Hour).Truncate(time.Second)
	creator, err := b.key.IssueRole(ps[0].ID, credential.RoleAdmin, ps[0].CreatedAt, creatorExpiry)
	if err != nil {
		t.Fatal(err)
	}
	mintsCapped(t, b, creator, creatorExpiry, "an admin")
}

// mintsCapped has the admin of token creator, whose token expires at
// creatorExpiry, add admins asked to expire never, later and sooner: the
// first two expire with creatorExpiry, the last when asked, and each
// minted token verifies as an admin's expiring as answered and lists polls.
func mintsCapped(t *testing.T, b *bundle, creator string, creatorExpiry time.Time, who string) {
	t.Helper()
	for _, c := range []struct {
		expires string
		want    time.Time
	}{
		{"", creatorExpiry},
		{"720h", creatorExpiry},
		{"10m", time.Now().Add(10 * time.Minute)},
	} {
		r := b.adminDo(t, http.MethodPost, "/v1/principals", creator, `{"names":["ops"],"role":"admin","expires":"`+c.expires+`"}`)
		if r.code != http.StatusCreated {
			t.Fatalf("%s asking for an admin expiring %q: %d %s", who, c.expires, r.code, r.raw)
		}
		got, err := time.Parse(time.RFC3339, r.str("expires_at"))
		if err != nil || got.Sub(c.want).Abs() > 2*time.Second {
			t.Fatalf("an admin asked to expire %q by %s whose token expires at %v expires at %q, want %v",
				c.expires, who, creatorExpiry, r.str("expires_at"), c.want)
		}
		p, _ := r.body["principals"].([]any)[0].(map[string]any)
		token, _ := p["token"].(string)
		id, err := b.cfg.Credentials.Verify(context.Background(), token)
		if err != nil || !id.ExpiresAt.Equal(got.Truncate(time.Second)) || id.Role != credential.RoleAdmin || id.ExpiresAt.After(creatorExpiry) {
			t.Fatalf("the minted admin's token: %+v (%v), want an admin's expiring at %v, no later than %v", id, err, got, creatorExpiry)
		}
		if got := b.adminDo(t, http.MethodGet, "/v1/polls", token, ""); got.code != http.StatusOK {
			t.Fatalf("the admin token issued over HTTP lists polls: %d %s, want 200", got.code, got.raw)
		}
	}
}

// TestAdminListPrincipals pages through the principals: every one once,
// in id order, with its role and revocation; a bad page is 400.
func TestAdminListPrincipals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, admin := b.admin(t, "app")
	gone, _ := b.signed(t, "gone", time.Time{})
	if err := b.store.RevokePrincipal(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	all, err := b.store.Principals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > len(all) {
			t.Fatalf("more pages than principals: %v", got)
		}
		path := "/v1/principals?limit=2"
		if after != "" {
			path += "&after=" + after
		}
		r := b.adminDo(t, http.MethodGet, path, admin, "")
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.code, r.raw)
		}
		ps, _ := r.body["principals"].([]any)
		for _, e := range ps {
			p, _ := e.(map[string]any)
			id, _ := p["principal_id"].(string)
			got = append(got, id)
			if revoked := p["revoked_at"] != nil; revoked != (id == gone.ID) {
				t.Errorf("principal %s listed with revoked_at %v", id, p["revoked_at"])
			}
		}
		if after = r.str("next_after"); after == "" {
			break
		}
	}
	want := make([]string, len(all))
	for i, p := range all {
		want[i] = p.ID
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("paged principals %v, want %v", got, want)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "after=not%20an%20id"} {
		r := b.adminDo(t, http.MethodGet, "/v1/principals?"+q, admin, "")
		wantProblemType(t, r, http.StatusBadRequest, "invalid-request")
	}
}

// TestAdminWriteHoldsHereAtOnce: the intake that answered an admin write
// holds its effect before answering, with no NOTIFY to tell it (its
// handler is served without Serve, so it hears none): a poll created
// takes votes, a principal revoked is refused.
func TestAdminWriteHoldsHereAtOnce(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	keys, _ := stream.NewKeys(prefix, 1)
	key, _ := credential.GenerateKey()
	set, _ := credential.NewKeySet(key)
	cfg := intake.Config{Rate: 1000, Burst: 1000, Credentials: credential.NewVerifier(set), TokenKey: &key}
	srv, err := intake.New(cfg, store, rdb, keys, testLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	b := &bundle{store: store, rdb: rdb, keys: keys, url: ts.URL, client: ts.Client(), cfg: cfg, srv: srv, key: key, handlerOnly: true}
	_, admin := b.admin(t, "app")
	voter, token := b.signed(t, "voter", time.Time{})
	if err := srv.Reload(context.Background()); err != nil { // what Serve loads at start
		t.Fatal(err)
	}
	if r := b.adminDo(t, http.MethodPost, "/v1/polls", admin, `{"poll_id":"now","title":"Now?","choices":["y"]}`); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	wantAccepted(t, b.vote(t, token, "v1", "now", "y"), "v1", ledger.StatusPending)
	if r := b.adminDo(t, http.MethodPost, "/v1/principals/"+voter.ID+"/revoke", admin, ""); r.code != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.code, r.raw)
	}
	if r := b.vote(t, token, "v2", "now", "y"); r.code != http.StatusUnauthorized {
		t.Fatalf("the principal just revoked here voted: %d %s, want 401", r.code, r.raw)
	}
}

// TestAdminMalformedBodies: a body the admin routes cannot read answers
// 400 saying what is wrong and where (the byte, or the field and what it
// takes), as the vote route does, never encoding/json's bare words.
func TestAdminMalformedBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, admin := b.admin(t, "app")
	for _, tc := range []struct {
		path, body string
		want       []string
	}{
		{"/v1/polls", `{"poll_id":"x","title":`, []string{"ends before the object is closed", "after byte 23"}},
		{"/v1/polls", `{"poll_id":"x" "title":"T"}`, []string{"not valid JSON at byte 16", "after object key:value pair"}},
		{"/v1/polls", `{"poll_id":"x","choices":["a",]}`, []string{"not valid JSON at byte 31"}},
		{"/v1/principals", `["x"]`, []string{"must be a JSON object, not an array"}},
		{"/v1/polls", `{"poll_id":"x","title":"T","choices":"a"}`, []string{`"choices" is a string`, "takes an array of strings"}},
		{"/v1/polls", `{"poll_id":"x","title":"T","choices":["a"],"public_results":"yes"}`, []string{`"public_results" is a string`, "takes true or false"}},
		{"/v1/polls", `{"poll_id":"x","title":"T","choices":["a"],"ballot":{"kind":"score","max_score":"5"}}`, []string{`"ballot.max_score" is a string`, "takes a number"}},
		{"/v1/polls", `{"poll_id":"x","title":"T","choices":["a"],"ballot":{"kind":"score","colour":1}}`, []string{`key "colour" in "ballot"`}},
		{"/v1/polls", `{"poll_id":"x","colour":"red"}`, []string{`key "colour", which is not one of the route's`}},
		{"/v1/polls", "\xef\xbb\xbf{}", []string{"byte order mark"}},
		{"/v1/principals", `{"names":["ann","bob"`, []string{"ends before the object is closed"}},
		{"/v1/principals", `{"names":"ann"}`, []string{`"names" is a string`, "takes an array of strings"}},
		{"/v1/principals", `{"names":["ann"]} x`, []string{"goes on after the JSON object"}},
		{"/v1/polls/x/close", `{"at":`, []string{"ends before the object is closed"}},
	} {
		r := b.adminDo(t, http.MethodPost, tc.path, admin, tc.body)
		wantProblemType(t, r, http.StatusBadRequest, "invalid-request")
		d := r.str("detail")
		for _, w := range tc.want {
			if !strings.Contains(d, w) {
				t.Errorf("POST %s %q: detail %q, want it to say %q", tc.path, tc.body, d, w)
			}
		}
		if strings.Contains(d, "unexpected EOF") || strings.Contains(d, "json:") || strings.Contains(d, "Go value") {
			t.Errorf("POST %s %q: detail %q speaks encoding/json's words", tc.path, tc.body, d)
		}
	}
}

// TestAdminRevokeMinted: an admin that minted an admin over HTTP, which
// minted a voter (GET /v1/principals names who minted each), is revoked
// with ?minted=true: the answer says 2 more
// were revoked, and the voter's token is refused within a second, while
// a voter another admin minted still votes; a minted value other than
// true or false is 400 and revokes nothing.
func TestAdminRevokeMinted(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *config) { c.AddAdminsOverHTTP = true })
	_, root := b.admin(t, "root")
	rootID := func() string {
		id, err := b.cfg.Credentials.Verify(context.Background(), root)
		if err != nil {
			t.Fatal(err)
		}
		return id.PrincipalID
	}()
	_, ops := b.admin(t, "ops")
	mint := func(by, role string) (string, string) {
		t.Helper()
		r := b.adminDo(t, http.MethodPost, "/v1/principals", by, `{"names":["x"],"role":"`+role+`"}`)
		if r.code != http.StatusCreated {
			t.Fatalf("minting a %s: %d %s", role, r.code, r.raw)
		}
		p := r.body["principals"].([]any)[0].(map[string]any)
		return p["principal_id"].(string), p["token"].(string)
	}
	mintedAdminID, mintedAdmin := mint(root, "admin")
	mintedVoterID, mintedVoter := mint(mintedAdmin, "voter")
	_, othersVoter := mint(ops, "voter")
	r := b.adminDo(t, http.MethodGet, "/v1/principals?limit=1000", ops, "")
	minters := map[string]any{}
	for _, e := range r.body["principals"].([]any) {
		e := e.(map[string]any)
		minters[e["principal_id"].(string)] = e["created_by"]
	}
	if minters[mintedAdminID] != rootID || minters[mintedVoterID] != mintedAdminID || minters[rootID] != nil {
		t.Fatalf("GET /v1/principals names the minters %v, want %s by %s, %s by %s, and %s by an operator (null)",
			minters, mintedAdminID, rootID, mintedVoterID, mintedAdminID, rootID)
	}

	r = b.adminDo(t, http.MethodPost, "/v1/principals/"+rootID+"/revoke?minted=maybe", ops, "")
	wantProblemType(t, r, http.StatusBadRequest, "invalid-request")
	if b.srv.Revoked(rootID) {
		t.Fatal("a refused revocation revoked the admin")
	}
	r = b.adminDo(t, http.MethodPost, "/v1/principals/"+rootID+"/revoke?minted=true", ops, "")
	if n, _ := r.body["minted_revoked"].(float64); r.code != http.StatusOK || n != 2 {
		t.Fatalf("revoking the admin with what it minted: %d %s, want 200 with minted_revoked 2", r.code, r.raw)
	}
	testenv.Eventually(t, 10*time.Second, "the voter the revoked admin's admin minted refused", func() bool {
		return b.vote(t, mintedVoter, "m1", "p1", "a").code == http.StatusUnauthorized
	})
	wantAccepted(t, b.vote(t, othersVoter, "o1", "p1", "a"), "o1", ledger.StatusPending)
}

// TestAdminAddPrincipalsIdempotent: under an Idempotency-Key the same
// request adds its principals once and answers them again, with
// credentials that work; other names under the same key are refused 409
// with nothing added; another admin's same key is another request; a key
// that is not visible ASCII is refused 400.
func TestAdminAddPrincipalsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, admin := b.admin(t, "app")
	_, other := b.admin(t, "other app")
	add := func(token, key, names string) reply {
		t.Helper()
		req := b.request(t, http.MethodPost, "/v1/principals", token, "application/json", []byte(`{"names":[`+names+`]}`))
		req.Header.Set("Idempotency-Key", key)
		return b.send(t, req)
	}
	ids := func(r reply) []string {
		var out []string
		ps, _ := r.body["principals"].([]any)
		for _, p := range ps {
			id, _ := p.(map[string]any)["principal_id"].(string)
			out = append(out, id)
		}
		return out
	}
	first := add(admin, "setup-1", `"a","b"`)
	again := add(admin, "setup-1", `"a","b"`)
	if first.code != http.StatusCreated || again.code != http.StatusCreated || !slices.Equal(ids(first), ids(again)) || len(ids(first)) != 2 {
		t.Fatalf("the same request twice: %d %v, %d %v; want 201 with the same principals", first.code, ids(first), again.code, ids(again))
	}
	token, _ := again.body["principals"].([]any)[0].(map[string]any)["token"].(string)
	if r := b.vote(t, token, "e1", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("a vote with the credential of the repeated answer: %d %s", r.code, r.raw)
	}
	r := add(admin, "setup-1", `"a","c"`)
	wantProblemType(t, r, http.StatusConflict, "idempotency-key-reused")
	if r := add(other, "setup-1", `"a","b"`); r.code != http.StatusCreated || slices.Contains(ids(first), ids(r)[0]) {
		t.Fatalf("another admin's key: %d %v, want new principals", r.code, ids(r))
	}
	if r := add(admin, "two words", `"a"`); r.code != http.StatusBadRequest {
		t.Fatalf("a key with a space: %d %s, want 400", r.code, r.raw)
	}
	ps, err := b.store.Principals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3+2+2 { // voter, app, other app; setup-1 of each admin
		t.Fatalf("%d principals, want 7", len(ps))
	}
}
