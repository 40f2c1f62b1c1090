package intake_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"tally/credential"
	"tally/internal/oidctest"
	"tally/internal/testenv"
	"tally/ledger"
)

// This file tests OpenID Connect voters at intake, against a real OpenID
// provider on a loopback port (internal/oidctest): a token it issued
// votes and is counted under the principal id of its (issuer, subject);
// every bad one is refused 401 invalid_token and enqueues nothing; a
// revoked subject is refused within a second; while PostgreSQL or the
// provider is down, the keys intake holds decide.

// oidcIssuer is an issuer of the tokens of url for the provider's client,
// with short intervals unless cfg sets them. Intake runs it (Serve).
func oidcIssuer(t *testing.T, url string, cfg credential.OIDCConfig) *credential.OIDCIssuer {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	cfg.Issuer, cfg.Audience, cfg.HTTPClient = url, oidctest.ClientID, client
	if cfg.RetryMin == 0 {
		cfg.RetryMin = 20 * time.Millisecond
	}
	o, err := credential.NewOIDCIssuer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// trusting makes intake take the tokens of issuers, beside those of the
// fixture's key (its principal's token still votes).
func trusting(issuers ...*credential.OIDCIssuer) option {
	return func(c *config) {
		keySet, err := credential.NewKeySet(*c.TokenKey)
		if err != nil {
			panic(err) // one key: NewKeySet refuses only an id given twice
		}
		c.Credentials = credential.NewVerifier(keySet, issuers...)
	}
}

// waitKeys waits until intake fetched the keys of every issuer but those
// of without.
func waitKeys(t *testing.T, b *bundle, without ...string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, "intake fetched the issuers' keys", func() bool {
		return slices.Equal(b.cfg.Credentials.IssuersWithoutKeys(), without)
	})
}

// claimsOf are a token's claims, read without verifying, and its claims
// part as it is in the token.
func claimsOf(t *testing.T, token string) (map[string]any, string) {
	t.Helper()
	parts := strings.Split(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return c, parts[1]
}

// waitRecorded waits until the ledger records principalID's event id.
func waitRecorded(t *testing.T, b *bundle, principalID, eventID string, d time.Duration) {
	t.Helper()
	testenv.Eventually(t, d, "the ledger to record event "+eventID+" of "+principalID, func() error {
		rec, err := b.store.Event(context.Background(), principalID, eventID)
		if err == nil && rec.Status != ledger.StatusRecorded {
			err = errors.New("status " + string(rec.Status))
		}
		return err
	})
}

// TestOIDCVoteCountedAndRevoked: a token the provider issued votes (202)
// and is counted under PrincipalIDFor(issuer, subject); /readyz says the
// issuer's keys are held; once that principal is revoked, its token (which
// intake verified and cached) is refused within a second.
func TestOIDCVoteCountedAndRevoked(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	b := setup(t, trusting(oidcIssuer(t, p.URL(), credential.OIDCConfig{})))
	runProjector(t, b)
	waitKeys(t, b)
	tok := p.Token()
	id := credential.PrincipalIDFor(p.URL(), oidctest.ClientID)

	wantAccepted(t, b.vote(t, tok, "e1", "p1", "a"), "e1", ledger.StatusPending)
	waitRecorded(t, b, id, "e1", 10*time.Second)
	res, err := b.store.Results(context.Background(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 1 {
		t.Fatalf("p1 counts %d votes, want 1: %+v", res.Total, res)
	}
	if r := b.readyz(t); r.code != http.StatusOK || r.str("status") != "ready" || r.body["checks"].(map[string]any)["oidc"] != "ok" {
		t.Fatalf("/readyz with the issuer's keys held: %d %s, want ready with oidc ok", r.code, r.raw)
	}

	if err := b.store.RevokePrincipal(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the revoked OpenID Connect subject's token refused", func() bool {
		return b.vote(t, tok, "e2", "p1", "b").code == http.StatusUnauthorized
	})
	wantInvalidToken(t, "the revoked subject's token", b.vote(t, tok, "e3", "p1", "b"))
}

// TestOIDCRefused: an expired token, a wrong audience, a wrong issuer,
// "alg": "none" and a key not in the provider's keys each get 401
// invalid_token, enqueue nothing and appear in no log line, while the
// provider's good token votes.
func TestOIDCRefused(t *testing.T) {
	t.Parallel()
	p, other := oidctest.Start(t), oidctest.Start(t)
	db := testenv.Postgres(t)
	rdb, prefix := testenv.Redis(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.LogBuffer
	b := setup(t, withStore(store), withRedis(rdb, prefix), withLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		trusting(oidcIssuer(t, p.URL(), credential.OIDCConfig{})))
	waitKeys(t, b)

	good := p.Token()
	claims, rawClaims := claimsOf(t, good)
	with := func(k string, v any) map[string]any {
		c := maps(claims)
		c[k] = v
		return c
	}
	key := p.SigningKey()
	bad := map[string]string{
		"expired":               p.Token(oidctest.ScopeExpired),
		"wrong audience":        oidctest.Sign(t, key.Private, key.ID, with("aud", []string{"another-client"})),
		"wrong issuer":          other.Token(),
		"wrong issuer, p's key": oidctest.Sign(t, key.Private, key.ID, with("iss", other.URL())),
		"alg none": base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"`+key.ID+`"}`)) +
			"." + rawClaims + ".",
		"key not in the JWKS":          oidctest.Sign(t, oidctest.Keys()[2], "key-unknown", claims),
		"key not in the JWKS, its kid": oidctest.Sign(t, oidctest.Keys()[2], key.ID, claims),
	}
	b.wantRefused(t, &logs, bad, good)
}

// maps is a copy of m.
func maps(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestOIDCPostgresDown stops a private PostgreSQL under a running intake
// and projector that trust two issuers: one whose keys intake fetched,
// and one down since intake started. During the outage a token of the
// cached key, never seen by intake, votes (and is counted once PostgreSQL
// is back); a token of a key intake does not hold (the provider rotated
// and stopped, or a key it never published) gets 401; a token of the
// issuer never reached gets 503 unavailable, and votes once that issuer
// answers. /readyz names the issuer without keys.
func TestOIDCPostgresDown(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	db := pg.Migrated("tally")
	rdb, prefix := testenv.Redis(t)
	p, down := oidctest.Start(t), oidctest.Stopped(t)
	// No refresh in this test's time: intake holds the keys of its first fetch.
	cached := oidcIssuer(t, p.URL(), credential.OIDCConfig{Refresh: time.Hour, MinRefresh: time.Hour})
	never := oidcIssuer(t, down.URL(), credential.OIDCConfig{Refresh: 200 * time.Millisecond, MinRefresh: 100 * time.Millisecond})
	b := setup(t, withDB(db), withRedis(rdb, prefix), trusting(cached, never), func(c *config) { c.PostgresTimeout = time.Second })
	runProjector(t, b)
	waitKeys(t, b, down.URL())
	if r := b.readyz(t); r.code != http.StatusOK || r.str("status") != "degraded" ||
		r.body["checks"].(map[string]any)["oidc"] != "no_keys" || !slices.Equal(r.body["down"].([]any), []any{"oidc"}) {
		t.Fatalf("/readyz with an issuer never reached: %d %s, want degraded, oidc no_keys", r.code, r.raw)
	}

	unseen := p.Token()
	claims, _ := claimsOf(t, unseen)
	p.Rotate(oidctest.Keys()[1], false)
	rotated := p.Token()
	p.Stop()
	neverTok := oidctest.Sign(t, down.SigningKey().Private, down.SigningKey().ID, map[string]any{
		"iss": down.URL(), "sub": "alice", "aud": oidctest.ClientID, "exp": time.Now().Add(time.Hour).Unix()})
	pg.Stop()

	wantAccepted(t, b.vote(t, unseen, "u1", "p1", "a"), "u1", ledger.StatusPending)
	wantInvalidToken(t, "a token of the rotated key, fetched by no intake", b.vote(t, rotated, "r1", "p1", "a"))
	wantInvalidToken(t, "a token of a key the provider never published", b.vote(t, oidctest.Sign(t, oidctest.Keys()[2], "key-unknown", claims), "k1", "p1", "a"))
	wantProblemType(t, b.vote(t, neverTok, "n1", "p1", "b"), http.StatusServiceUnavailable, "unavailable")
	if n := b.xlen(t); n != 1 {
		t.Fatalf("the stream holds %d entries, want 1 (u1)", n)
	}

	pg.Start()
	waitRecorded(t, b, credential.PrincipalIDFor(p.URL(), oidctest.ClientID), "u1", 20*time.Second)
	down.Start()
	testenv.Eventually(t, 5*time.Second, "the token of the issuer down since intake started votes once it answers", func() bool {
		return b.vote(t, neverTok, "n1", "p1", "b").code == http.StatusAccepted
	})
}

// TestOIDCIssuerDown: while the provider answers nothing, tokens signed by
// the key intake holds still vote, one never seen included; when it comes
// back with a rotated key, intake fetches the new key and its tokens vote.
func TestOIDCIssuerDown(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	var logs testenv.LogBuffer
	iss := oidcIssuer(t, p.URL(), credential.OIDCConfig{Refresh: 100 * time.Millisecond, MinRefresh: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	// A token of the rotated key is refused until intake fetches it: the
	// test's retries must not meet the limit of failed authentications.
	b := setup(t, trusting(iss), func(c *config) { c.AuthFailureRate = math.Inf(1) })
	waitKeys(t, b)
	before, unseen := p.Token(), p.Token()
	wantAccepted(t, b.vote(t, before, "e1", "p1", "a"), "e1", ledger.StatusPending)

	p.Stop()
	testenv.Eventually(t, 5*time.Second, "two fetches of the keys fail while the provider is stopped", func() bool {
		return strings.Count(logs.String(), "the keys fetched last stay in use") >= 2
	})
	wantAccepted(t, b.vote(t, before, "e2", "p1", "a"), "e2", ledger.StatusPending)
	wantAccepted(t, b.vote(t, unseen, "e3", "p1", "a"), "e3", ledger.StatusPending)

	p.Rotate(oidctest.Keys()[1], false)
	p.Start()
	rotated := p.Token()
	testenv.Eventually(t, 5*time.Second, "a token of the rotated key votes once the provider is back", func() bool {
		return b.vote(t, rotated, "e4", "p1", "a").code == http.StatusAccepted
	})
}

// TestRetirementIsOfTallyKeys: retiring a key id that happens to be the
// kid of a trusted issuer's key does not switch that key off: the
// issuer's tokens still vote once intake holds the retirement, while a
// token of tally's own key of that id would be refused
// (TestRevokedCredentialRefused).
func TestRetirementIsOfTallyKeys(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	b := setup(t, trusting(oidcIssuer(t, p.URL(), credential.OIDCConfig{})))
	waitKeys(t, b)
	tok := p.Token()
	header, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(header, &h); err != nil || h.Kid == "" {
		t.Fatalf("the provider's token names no kid: %s (%v)", header, err)
	}
	wantAccepted(t, b.vote(t, tok, "e1", "p1", "a"), "e1", ledger.StatusPending)

	ctx := context.Background()
	if err := b.store.RetireCredentialKey(ctx, h.Kid); err != nil {
		t.Fatal(err)
	}
	// A revocation after the retirement: once intake holds it, it holds
	// the retirement too.
	if err := b.store.RevokePrincipal(ctx, b.who.ID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "intake holds the revocation made after the retirement", func() bool { return b.srv.Revoked(b.who.ID) })
	wantAccepted(t, b.vote(t, tok, "e2", "p1", "a"), "e2", ledger.StatusPending)
}
