package credential_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"tally/credential"
	"tally/internal/oidctest"
	"tally/internal/testenv"
)

// TestOIDCTokenVerifies: a token the provider issued verifies, to the
// principal PrincipalIDFor(iss, sub), beside tally's own tokens, and again
// (from the cache) to the same identity.
func TestOIDCTokenVerifies(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	own := newKey(t)
	set, _ := credential.NewKeySet(own)
	v := credential.NewVerifier(set, runIssuer(t, credential.OIDCConfig{Issuer: p.URL()}))

	tok := p.Token()
	testenv.Eventually(t, 5*time.Second, "the provider's token verifies", verifies(v, tok))
	id, err := v.Verify(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	c := parts(t, tok).Claims
	sub, _ := c["sub"].(string)
	exp, _ := c["exp"].(float64)
	iat, _ := c["iat"].(float64)
	if c["iss"] != p.URL() || sub == "" || iat == 0 {
		t.Fatalf("the provider's token says iss %v, sub %v, iat %v", c["iss"], c["sub"], c["iat"])
	}
	want := credential.Identity{PrincipalID: credential.PrincipalIDFor(p.URL(), sub), Issuer: p.URL(),
		KeyID: p.SigningKey().ID, ExpiresAt: time.Unix(int64(exp), 0), IssuedAt: time.Unix(int64(iat), 0), Role: credential.RoleVoter}
	if id != want {
		t.Fatalf("identity %+v, want %+v", id, want)
	}
	if again, err := v.Verify(context.Background(), tok); err != nil || again != want {
		t.Fatalf("verified again: %+v, %v", again, err)
	}

	ownTok, err := own.Issue("p-alice", time.Now(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := v.Verify(context.Background(), ownTok); err != nil || id.PrincipalID != "p-alice" {
		t.Fatalf("tally's own token beside an issuer: %+v, %v", id, err)
	}
}

// TestOIDCRefuses: each way a token of an issuer can be wrong gets
// ErrInvalid, while the provider's good token verifies.
func TestOIDCRefuses(t *testing.T) {
	t.Parallel()
	p, other := oidctest.Start(t), oidctest.Start(t)
	forSID1 := runIssuer(t, credential.OIDCConfig{Issuer: p.URL()})
	v := credential.NewVerifier(nil, forSID1)
	// The same issuer, trusted for another audience.
	forTally := runIssuer(t, credential.OIDCConfig{Issuer: p.URL(), Audience: "tally"})
	vTally := credential.NewVerifier(nil, forTally)

	good := p.Token()
	testenv.Eventually(t, 5*time.Second, "the provider's token verifies", verifies(v, good))
	testenv.Eventually(t, 5*time.Second, "the verifier for audience tally has keys", func() error {
		_, err := vTally.Verify(context.Background(), good)
		if errors.Is(err, credential.ErrUnavailable) {
			return err
		}
		return nil
	})

	gp := parts(t, good)
	opKey := p.SigningKey()
	claims := func(change func(map[string]any)) map[string]any {
		c := map[string]any{}
		for k, v := range gp.Claims {
			c[k] = v
		}
		change(c)
		return c
	}
	header := func(h string) string { return base64.RawURLEncoding.EncodeToString([]byte(h)) }
	der, err := x509.MarshalPKIXPublicKey(&opKey.Private.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	hsHeader := header(`{"alg":"HS256","kid":"` + opKey.ID + `"}`)
	mac := hmac.New(sha256.New, der)
	mac.Write([]byte(hsHeader + "." + gp.rawClaims))
	publicKeyAsSecret := hsHeader + "." + gp.rawClaims + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))

	cases := []struct {
		name  string
		v     *credential.Verifier
		token string
	}{
		{"expired", v, p.Token(oidctest.ScopeExpired)},
		{"wrong audience", vTally, good},
		{"another issuer's token", v, other.Token()},
		{"alg none", v, header(`{"alg":"none","kid":"`+opKey.ID+`"}`) + "." + gp.rawClaims + "."},
		{"alg none, no signature part", v, header(`{"alg":"none"}`) + "." + gp.rawClaims},
		{"public key as HMAC secret", v, publicKeyAsSecret},
		{"another key, same kid", v, oidctest.Sign(t, oidctest.Keys()[2], opKey.ID, gp.Claims)},
		{"another key, unknown kid", v, oidctest.Sign(t, oidctest.Keys()[2], "key-unknown", gp.Claims)},
		{"another key, no kid", v, oidctest.Sign(t, oidctest.Keys()[2], "", gp.Claims)},
		{"claims changed", v, gp.rawHeader + "." + base64.RawURLEncoding.EncodeToString([]byte(
			strings.Replace(mustJSON(t, gp.Claims), `"sub":"`, `"sub":"x`, 1))) + "." + gp.rawSig},
		{"truncated signature", v, good[:len(good)-4]},
		// Signed by the provider's own key, with claims it would not give.
		{"iss of another issuer", v, oidctest.Sign(t, opKey.Private, opKey.ID, claims(func(c map[string]any) { c["iss"] = other.URL() }))},
		{"no exp", v, oidctest.Sign(t, opKey.Private, opKey.ID, claims(func(c map[string]any) { delete(c, "exp") }))},
		{"exp past the leeway", v, oidctest.Sign(t, opKey.Private, opKey.ID, claims(func(c map[string]any) {
			c["exp"] = time.Now().Add(-credential.Leeway - 5*time.Second).Unix()
		}))},
		{"not yet valid", v, oidctest.Sign(t, opKey.Private, opKey.ID, claims(func(c map[string]any) { c["nbf"] = time.Now().Add(time.Hour).Unix() }))},
		{"no sub", v, oidctest.Sign(t, opKey.Private, opKey.ID, claims(func(c map[string]any) { delete(c, "sub") }))},
		{"aud not a string", v, oidctest.Sign(t, opKey.Private, opKey.ID, claims(func(c map[string]any) { c["aud"] = 7 }))},
		{"iss not a string", v, oidctest.Sign(t, opKey.Private, opKey.ID, claims(func(c map[string]any) { c["iss"] = []string{p.URL()} }))},
		{"too long", v, oidctest.Sign(t, opKey.Private, opKey.ID, claims(func(c map[string]any) { c["pad"] = strings.Repeat("x", 16<<10) }))},
	}
	for _, c := range cases {
		if id, err := c.v.Verify(context.Background(), c.token); !errors.Is(err, credential.ErrInvalid) {
			t.Errorf("%s: Verify = %+v, %v; want ErrInvalid", c.name, id, err)
		}
	}

	// The provider's key signs claims that pass: the refusals above are
	// for what changed, not for the signing.
	within := oidctest.Sign(t, opKey.Private, opKey.ID, claims(func(c map[string]any) { c["exp"] = time.Now().Add(-credential.Leeway / 2).Unix() }))
	if _, err := v.Verify(context.Background(), within); err != nil {
		t.Errorf("a token expired within the leeway: %v", err)
	}
	if _, err := v.Verify(context.Background(), oidctest.Sign(t, opKey.Private, opKey.ID, gp.Claims)); err != nil {
		t.Errorf("the good claims signed again by the provider's key: %v", err)
	}
	if _, err := v.Verify(context.Background(), good); err != nil {
		t.Errorf("the good token after the refusals: %v", err)
	}
	if _, err := credential.NewVerifier(nil, forTally, forSID1).Verify(context.Background(), good); err != nil {
		t.Errorf("an issuer trusted for two audiences, the token's second: %v", err)
	}
}

// TestOIDCIssuerDown: while the provider answers nothing, the keys fetched
// last stay in use; when it comes back with a rotated key, the new key is
// fetched, its tokens verify, and the old key, gone from its keys, no
// longer verifies (not even a token verified before, from the cache).
func TestOIDCIssuerDown(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	logs := &logRecords{}
	v := credential.NewVerifier(nil, runIssuer(t, credential.OIDCConfig{Issuer: p.URL(), Logger: logs.logger(),
		Refresh: 100 * time.Millisecond, MinRefresh: 100 * time.Millisecond, RetryMin: 20 * time.Millisecond}))
	before, unseen := p.Token(), p.Token()
	testenv.Eventually(t, 5*time.Second, "a token verifies", verifies(v, before))

	p.Stop()
	testenv.Eventually(t, 5*time.Second, "two fetches fail while the provider is stopped", func() error {
		if n := logs.count("the keys fetched last stay in use"); n < 2 {
			return fmt.Errorf("%d failures logged", n)
		}
		return nil
	})
	if _, err := v.Verify(context.Background(), unseen); err != nil {
		t.Fatalf("a token of the cached key, never seen, while the provider is stopped: %v", err)
	}

	p.Rotate(oidctest.Keys()[1], false)
	p.Start()
	rotated := p.Token()
	testenv.Eventually(t, 5*time.Second, "a token of the rotated key verifies once the provider is back", verifies(v, rotated))
	for name, tok := range map[string]string{"verified before": before, "never verified": unseen} {
		if _, err := v.Verify(context.Background(), tok); !errors.Is(err, credential.ErrInvalid) {
			t.Errorf("a token of the key the provider dropped, %s: %v; want ErrInvalid", name, err)
		}
	}
}

// TestOIDCUnknownKidFetchesEarly: a token of a key id the keys lack is
// refused at once, without waiting for the provider (its keys endpoint
// hangs), and asks for an early fetch; a flood of such tokens makes at
// most one fetch per MinRefresh.
func TestOIDCUnknownKidFetchesEarly(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	const minRefresh = 150 * time.Millisecond
	// No background refresh in this test's time: only early fetches.
	v := credential.NewVerifier(nil, runIssuer(t, credential.OIDCConfig{Issuer: p.URL(), Refresh: time.Hour, MinRefresh: minRefresh}))
	testenv.Eventually(t, 5*time.Second, "a token verifies", verifies(v, p.Token()))
	// Let an early fetch asked for before the first one succeeded pass.
	time.Sleep(2 * minRefresh)
	fetched := p.KeyFetches()

	release := p.HoldKeys()
	p.Rotate(oidctest.Keys()[1], true)
	rotated := p.Token()
	start := time.Now()
	if _, err := v.Verify(context.Background(), rotated); !errors.Is(err, credential.ErrInvalid) {
		t.Fatalf("a token of a key not fetched yet: %v; want ErrInvalid", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Verify of an unknown kid took %v: it waited on the provider", d)
	}
	testenv.Eventually(t, 5*time.Second, "the unknown kid asks for a fetch", func() error {
		if p.KeyFetches() == fetched {
			return errors.New("no second fetch of the keys")
		}
		return nil
	})
	release()
	testenv.Eventually(t, 5*time.Second, "the rotated key's token verifies after the early fetch", verifies(v, rotated))

	// A flood of made-up key ids.
	claims := parts(t, rotated).Claims
	forged := make([]string, 20)
	for i := range forged {
		forged[i] = oidctest.Sign(t, oidctest.Keys()[2], fmt.Sprintf("made-up-%d", i), claims)
	}
	fetchesBefore := p.KeyFetches()
	const flood = 600 * time.Millisecond
	start = time.Now()
	for n := 0; time.Since(start) < flood; n++ {
		if _, err := v.Verify(context.Background(), forged[n%len(forged)]); !errors.Is(err, credential.ErrInvalid) {
			t.Fatalf("a made-up kid: %v", err)
		}
	}
	// Let the last early fetch asked for happen before counting.
	time.Sleep(2 * minRefresh)
	fetches := p.KeyFetches() - fetchesBefore
	if max := int64((flood+2*minRefresh)/minRefresh) + 1; fetches < 2 || fetches > max {
		t.Fatalf("%v of made-up kids made %d fetches of the keys; want 2 to %d (one per %v)", flood, fetches, max, minRefresh)
	}
}

// TestOIDCBackgroundRefresh: a rotated key is fetched by the refresh
// every Refresh, with no early fetch (MinRefresh is long).
func TestOIDCBackgroundRefresh(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	v := credential.NewVerifier(nil, runIssuer(t, credential.OIDCConfig{Issuer: p.URL(), Refresh: 100 * time.Millisecond, MinRefresh: time.Hour}))
	testenv.Eventually(t, 5*time.Second, "a token verifies", verifies(v, p.Token()))
	p.Rotate(oidctest.Keys()[1], false)
	testenv.Eventually(t, 5*time.Second, "the rotated key's token verifies after a refresh", verifies(v, p.Token()))
}

// TestOIDCUnavailable: while the issuer's keys were never fetched, its
// tokens get ErrUnavailable; once the provider answers, they verify.
func TestOIDCUnavailable(t *testing.T) {
	t.Parallel()
	p := oidctest.Stopped(t)
	logs := &logRecords{}
	v := credential.NewVerifier(nil, runIssuer(t, credential.OIDCConfig{Issuer: p.URL(), Logger: logs.logger()}))
	tok := oidctest.Sign(t, oidctest.Keys()[0], p.SigningKey().ID, map[string]any{"iss": p.URL(), "sub": "alice", "aud": oidctest.ClientID,
		"exp": time.Now().Add(time.Hour).Unix()})
	testenv.Eventually(t, 5*time.Second, "a fetch fails", func() error {
		if logs.count("answered unavailable") == 0 {
			return errors.New("no failure logged")
		}
		return nil
	})
	if _, err := v.Verify(context.Background(), tok); !errors.Is(err, credential.ErrUnavailable) || errors.Is(err, credential.ErrInvalid) {
		t.Fatalf("a token of an issuer never reached: %v; want ErrUnavailable", err)
	}
	p.Start()
	testenv.Eventually(t, 5*time.Second, "the token verifies once the provider answers", verifies(v, tok))
}

// TestOIDCDiscoveryNamesAnotherIssuer: a provider whose discovery document
// names another issuer than the one configured gives no keys.
func TestOIDCDiscoveryNamesAnotherIssuer(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t)
	logs := &logRecords{}
	localhost := strings.Replace(p.URL(), "127.0.0.1", "localhost", 1)
	v := credential.NewVerifier(nil, runIssuer(t, credential.OIDCConfig{Issuer: localhost, Logger: logs.logger()}))
	testenv.Eventually(t, 5*time.Second, "the fetch is refused", func() error {
		if logs.count("calls itself") == 0 {
			return errors.New("no refusal logged")
		}
		return nil
	})
	tok := oidctest.Sign(t, oidctest.Keys()[0], p.SigningKey().ID, map[string]any{"iss": localhost, "sub": "alice", "aud": oidctest.ClientID,
		"exp": time.Now().Add(time.Hour).Unix()})
	if _, err := v.Verify(context.Background(), tok); !errors.Is(err, credential.ErrUnavailable) {
		t.Fatalf("%v; want ErrUnavailable", err)
	}
}

func TestOIDCConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg credential.OIDCConfig
		ok  bool
	}{
		{credential.OIDCConfig{Issuer: "https://id.example.org", Audience: "tally"}, true},
		{credential.OIDCConfig{Issuer: "https://id.example.org/realms/x/", Audience: "tally"}, true},
		{credential.OIDCConfig{Issuer: "http://127.0.0.1:8080", Audience: "tally"}, true},
		{credential.OIDCConfig{Issuer: "http://[::1]:8080", Audience: "tally"}, true},
		{credential.OIDCConfig{Issuer: "http://localhost", Audience: "tally"}, true},
		{credential.OIDCConfig{Issuer: "http://id.example.org", Audience: "tally"}, false},
		{credential.OIDCConfig{Issuer: "http://127.0.0.1.example.org", Audience: "tally"}, false},
		{credential.OIDCConfig{Issuer: "ftp://id.example.org", Audience: "tally"}, false},
		{credential.OIDCConfig{Issuer: "id.example.org", Audience: "tally"}, false},
		{credential.OIDCConfig{Issuer: "https://id.example.org?x=1", Audience: "tally"}, false},
		{credential.OIDCConfig{Issuer: "https://id.example.org#x", Audience: "tally"}, false},
		{credential.OIDCConfig{Issuer: "https://u@id.example.org", Audience: "tally"}, false},
		{credential.OIDCConfig{Issuer: "", Audience: "tally"}, false},
		{credential.OIDCConfig{Issuer: "https://id.example.org"}, false},
		{credential.OIDCConfig{Issuer: "https://id.example.org", Audience: "tally", Refresh: -1}, false},
		{credential.OIDCConfig{Issuer: "https://id.example.org", Audience: "tally", MinRefresh: -1}, false},
		{credential.OIDCConfig{Issuer: "https://id.example.org", Audience: "tally", RetryMin: -1}, false},
	} {
		_, err := credential.NewOIDCIssuer(c.cfg)
		if (err == nil) != c.ok {
			t.Errorf("NewOIDCIssuer(%+v) = %v; want ok %v", c.cfg, err, c.ok)
		}
	}
}

// TestOIDCRunOnce: of two Runs at once, one returns an error at once and
// the other runs until its context ends; then Run may run again.
func TestOIDCRunOnce(t *testing.T) {
	t.Parallel()
	o, err := credential.NewOIDCIssuer(credential.OIDCConfig{Issuer: "http://127.0.0.1:1", Audience: "tally", RetryMin: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 2)
		go func() { done <- o.Run(ctx) }()
		go func() { done <- o.Run(ctx) }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("both Runs ran")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("neither of two Runs returned within 5 s")
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the Run that ran: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return within 5 s of its context's end")
		}
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestVerifierRun: a Verifier's Run keeps the keys of each of its issuers
// (one given twice is one), IssuersWithoutKeys names an issuer until
// its keys were fetched, a second Run at once fails, and Run returns
// when its context ends.
func TestVerifierRun(t *testing.T) {
	t.Parallel()
	p := oidctest.Stopped(t)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	o, err := credential.NewOIDCIssuer(credential.OIDCConfig{Issuer: p.URL(), Audience: oidctest.ClientID,
		HTTPClient: client, RetryMin: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	v := credential.NewVerifier(nil, o, o)
	if got := v.Issuers(); !slices.Equal(got, []string{p.URL()}) {
		t.Fatalf("Issuers: %q, want [%s]", got, p.URL())
	}
	if got := v.IssuersWithoutKeys(); !slices.Equal(got, []string{p.URL()}) {
		t.Fatalf("IssuersWithoutKeys before Run: %q, want [%s]", got, p.URL())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- v.Run(ctx) }()
	go func() { done <- v.Run(ctx) }()

	p.Start()
	testenv.Eventually(t, 5*time.Second, "the provider's token verifies once it answers", verifies(v, p.Token()))
	if got := v.IssuersWithoutKeys(); len(got) != 0 {
		t.Fatalf("IssuersWithoutKeys once the keys were fetched: %q, want none", got)
	}
	cancel()
	var failed int
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				failed++
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return within 5 s of its context's end")
		}
	}
	if failed != 1 {
		t.Fatalf("of two Runs at once, %d returned an error, want 1 (the issuer runs once)", failed)
	}
	if err := credential.NewVerifier(nil).Run(context.Background()); err != nil {
		t.Fatalf("Run of a Verifier with no issuer: %v", err)
	}
}
