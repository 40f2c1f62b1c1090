package intake_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tally/credential"
	"tally/internal/testenv"
	"tally/ledger"
)

// This file tests signed credentials at intake: a token that verifies
// itself votes with no query, every bad one is refused 401 without a
// trace, and the revocations held in memory refuse a revoked principal or
// a retired key at once, a PostgreSQL outage included.

// TestSignedBurstCostsNoQuery: principals intake never saw vote with
// signed tokens, and unknown poll ids are answered 404, without a single
// query to PostgreSQL.
func TestSignedBurstCostsNoQuery(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	var queries queryCounter
	store := tracedStore(t, db, &queries)
	// 50 votes at once can take a loaded machine's Redis past the 1 s
	// default (503 maybe-queued, seen): this test counts queries, not
	// Redis' latency.
	b := setup(t, withStore(store), withRedis(rdb, prefix), func(c *config) {
		c.RequestTimeout, c.RedisTimeout = 10*time.Second, 8*time.Second
	})
	const voters = 50
	names := make([]string, voters)
	for i := range names {
		names[i] = "burst"
	}
	ps, err := store.AddPrincipals(context.Background(), names, "")
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]string, voters)
	for i, p := range ps {
		created := p.CreatedAt
		if i%2 == 0 {
			// Older than the idempotency window: before, each of their
			// votes cost a ledger lookup.
			created = created.Add(-48 * time.Hour)
		}
		if tokens[i], err = b.key.Issue(p.ID, created, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	// The NOTIFY of the addition makes intake read the revocations again:
	// wait for it to be done.
	before := queries.n.Load()
	for quiet := 0; quiet < 3; {
		time.Sleep(100 * time.Millisecond)
		if n := queries.n.Load(); n == before {
			quiet++
		} else {
			before, quiet = n, 0
		}
	}
	var wg sync.WaitGroup
	replies := make([]reply, len(tokens))
	for i, tok := range tokens {
		wg.Go(func() { replies[i] = b.vote(t, tok, "e1", "p1", "a") })
	}
	wg.Wait()
	for i, r := range replies {
		if r.code != http.StatusAccepted {
			t.Fatalf("vote %d: %d %s, want 202", i, r.code, r.raw)
		}
	}
	for _, id := range []string{"nope", "p", "p1-", "P1"} {
		wantProblemType(t, b.vote(t, tokens[0], "u-"+id, id, "a"), http.StatusNotFound, "unknown-poll")
	}
	if n := queries.n.Load() - before; n != 0 {
		t.Fatalf("%d votes with new signed tokens and 4 unknown polls ran %d queries, want 0", len(tokens), n)
	}
	if n := b.xlen(t); n != int64(len(tokens)) {
		t.Fatalf("the stream holds %d entries, want %d", n, len(tokens))
	}
}

// TestSignedCredentialRefused: every kind of bad token gets 401 with the
// invalid_token challenge, enqueues nothing, and appears in no log line.
func TestSignedCredentialRefused(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.LogBuffer
	b := setup(t, withStore(store), withRedis(rdb, prefix), withLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	p, good := b.signed(t, "voter", time.Time{})
	other, err := credential.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	byOther, _ := other.Issue(p.ID, p.CreatedAt, time.Time{})
	expired, _ := b.key.Issue(p.ID, p.CreatedAt, time.Now().Add(-time.Hour))
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(bytes.Replace(payload, []byte(p.ID), []byte("p-mallory"), 1)) + "." + parts[2]
	notYet := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Issuer: credential.Issuer, Subject: p.ID,
		NotBefore: jwt.NewNumericDate(time.Now().Add(time.Hour))})
	notYet.Header["kid"] = b.key.ID
	keyJSON, _ := b.key.MarshalJSON()
	notYetToken := signWithKeyFile(t, notYet, keyJSON)
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"`+b.key.ID+`"}`)) + "." + parts[1] + "."

	bad := map[string]string{
		"tampered": tampered, "truncated": good[:len(good)-10], "another key": byOther,
		"expired": expired, "not yet valid": notYetToken, "alg none": none, "garbage": "eyJhbGciOi.x.y",
	}
	b.wantRefused(t, &logs, bad, good)
}

// TestTokenOfAnotherKeyNamed: a token of tally's own signed by a key this
// intake does not hold (a second key made by mistake) gets a 401 that says
// so and names that key and the one intake holds; a token of its own key
// that fails its check is only invalid.
func TestTokenOfAnotherKeyNamed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, good := b.signed(t, "voter", time.Time{})
	other, err := credential.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	byOther, err := other.Issue(p.ID, p.CreatedAt, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r := b.vote(t, byOther, "e1", "p1", "a")
	wantInvalidToken(t, "another key", r)
	d := r.str("detail")
	for _, w := range []string{`signed by credential key "` + other.ID + `"`, "which this intake does not hold", "(it holds " + b.key.ID + ")", "give intake that key too"} {
		if !strings.Contains(d, w) {
			t.Errorf("a token of another key: detail %q, want it to say %q", d, w)
		}
	}
	expired, err := b.key.Issue(p.ID, p.CreatedAt, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"expired": expired, "bad signature": good[:len(good)-4] + "AAAA"} {
		r := b.vote(t, tok, "e1", "p1", "a")
		wantInvalidToken(t, name, r)
		if d := r.str("detail"); !strings.Contains(d, "invalid or expired") || strings.Contains(d, "does not hold") {
			t.Errorf("%s, of this intake's key: detail %q, want only invalid or expired", name, d)
		}
	}
}

// wantRefused checks that each of bad, voted with, gets 401 with the
// invalid_token challenge and counts as an invalid credential, that none
// is enqueued or appears in logs, and that good then votes (and is not
// logged either).
func (b *bundle) wantRefused(t *testing.T, logs *testenv.LogBuffer, bad map[string]string, good string) {
	t.Helper()
	for name, tok := range bad {
		wantInvalidToken(t, name, b.vote(t, tok, "e1", "p1", "a"))
		if strings.Contains(logs.String(), tok) {
			t.Errorf("%s: the token is in the log", name)
		}
	}
	if n := b.xlen(t); n != 0 {
		t.Fatalf("bad tokens enqueued %d entries", n)
	}
	if got := count(b.m.Credentials.WithLabelValues("invalid")); got != len(bad) {
		t.Fatalf("credentials_total{result=invalid} %d, want %d", got, len(bad))
	}
	wantAccepted(t, b.vote(t, good, "e1", "p1", "a"), "e1", ledger.StatusPending)
	if strings.Contains(logs.String(), good) {
		t.Fatal("the good token is in the log")
	}
}

// wantInvalidToken checks r is 401 with the invalid_token challenge.
func wantInvalidToken(t *testing.T, what string, r reply) {
	t.Helper()
	if r.code != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != `Bearer error="invalid_token"` {
		t.Errorf("%s: %d %q %s, want 401 with the invalid_token challenge", what, r.code, r.header.Get("WWW-Authenticate"), r.raw)
	}
}

// signWithKeyFile signs tok with the secret of the JSON Web Key keyJSON.
func signWithKeyFile(t *testing.T, tok *jwt.Token, keyJSON []byte) string {
	t.Helper()
	var jwk struct{ K string }
	if err := json.Unmarshal(keyJSON, &jwk); err != nil {
		t.Fatal(err)
	}
	secret, err := base64.RawURLEncoding.DecodeString(jwk.K)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tok.SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRevokedCredentialRefused: a revoked principal's signed token and a
// retired key's tokens are refused within a second, by the NOTIFY of the
// change.
func TestRevokedCredentialRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	p, token := b.signed(t, "voter", time.Time{})
	_, other := b.signed(t, "other", time.Time{})
	wantAccepted(t, b.vote(t, token, "e1", "p1", "a"), "e1", ledger.StatusPending)
	if err := b.store.RevokePrincipal(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the revoked principal's token refused", func() bool {
		return b.vote(t, token, "e2", "p1", "a").code == http.StatusUnauthorized
	})
	wantAccepted(t, b.vote(t, other, "o1", "p1", "b"), "o1", ledger.StatusPending)
	if err := b.store.RetireCredentialKey(ctx, b.key.ID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "a token of the retired key refused", func() bool {
		return b.vote(t, other, "o2", "p1", "b").code == http.StatusUnauthorized
	})
	if got := count(b.m.Credentials.WithLabelValues("revoked")); got < 2 {
		t.Fatalf("credentials_total{result=revoked} %d, want 2 at least", got)
	}
}

// TestReissuedCredentialRefused: once a principal is reissued a token,
// every intake refuses its earlier tokens within a second (the NOTIFY of
// the reissue), both the one issued just before and one issued long ago,
// while the new token votes; another principal's token is untouched.
func TestReissuedCredentialRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	p, lost := b.signed(t, "voter", time.Time{})
	older, err := b.key.IssueRoleAt(p.ID, credential.RoleVoter, p.CreatedAt, p.CreatedAt.Add(-time.Hour), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	_, other := b.signed(t, "other", time.Time{})
	wantAccepted(t, b.vote(t, lost, "e1", "p1", "a"), "e1", ledger.StatusPending)

	_, validAfter, err := b.store.ReissuePrincipal(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := b.key.IssueRoleAt(p.ID, credential.RoleVoter, p.CreatedAt, validAfter, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the token the reissue replaced refused", func() bool {
		return b.vote(t, lost, "e2", "p1", "a").code == http.StatusUnauthorized
	})
	wantInvalidToken(t, "the replaced token", b.vote(t, lost, "e3", "p1", "a"))
	wantInvalidToken(t, "a token of the principal issued an hour before", b.vote(t, older, "e4", "p1", "a"))
	wantAccepted(t, b.vote(t, fresh, "e5", "p1", "a"), "e5", ledger.StatusPending)
	wantAccepted(t, b.vote(t, other, "o1", "p1", "b"), "o1", ledger.StatusPending)
}

// TestPostgresDownCredentials stops a private PostgreSQL under a running
// intake and projector: a signed principal intake never saw votes and is
// counted once PostgreSQL is back; a revoked one is refused, however long
// before the outage it was revoked, even when it had voted through this
// intake before.
func TestPostgresDownCredentials(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	db := pg.Migrated("tally")
	rdb, prefix := testenv.Redis(t)
	b := setup(t, withDB(db), withRedis(rdb, prefix), func(c *config) { c.PostgresTimeout = time.Second })
	runProjector(t, b)
	ctx := context.Background()
	_, newToken := b.signed(t, "newcomer", time.Time{})
	revokedSigned, revokedToken := b.signed(t, "revoked-signed", time.Time{})
	wantAccepted(t, b.vote(t, revokedToken, "r1", "p1", "a"), "r1", ledger.StatusPending)
	if err := b.store.RevokePrincipal(ctx, revokedSigned.ID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "intake holds the revocation of "+revokedSigned.ID, func() bool { return b.srv.Revoked(revokedSigned.ID) })
	pg.Stop()

	wantAccepted(t, b.vote(t, newToken, "n1", "p1", "b"), "n1", ledger.StatusPending)
	if r := b.vote(t, revokedToken, "x", "p1", "b"); r.code != http.StatusUnauthorized {
		t.Fatalf("the revoked principal voted during the outage: %d %s, want 401", r.code, r.raw)
	}

	pg.Start()
	testenv.Eventually(t, 20*time.Second, "the newcomer's vote recorded once PostgreSQL is back", func() bool {
		return b.status(t, newToken, "n1").str("status") == "recorded"
	})
	// r1, accepted before the outage, may have waited in the stream
	// through it.
	testenv.Eventually(t, 20*time.Second, "p1 counts r1 and n1", func() bool {
		res, err := b.store.Results(ctx, "p1")
		return err == nil && res.Total == 2
	})
	if res, err := b.store.Results(ctx, "p1"); err != nil || res.Total != 2 {
		t.Fatalf("p1 counts %+v (%v), want 2 votes (r1, n1)", res, err)
	}
}
