// Package oidctest runs a real OpenID provider for tests: zitadel/oidc's
// pkg/op with its example storage, on a loopback port, over plain HTTP.
// Its tokens are JWT access tokens of the example's service user, asked
// for by the client credentials grant of ClientID: their subject and
// audience are ClientID, their issuer the provider's URL, and they are
// signed with RS256 by the provider's signing key.
//
// A test may stop the provider (it then answers nothing), start it again
// on the same address, rotate its signing key, hold its keys endpoint,
// and count the fetches of its keys. Tests only: no package but a test
// imports it.
//
// Files:
//
//   - oidctest.go: Provider, its lifecycle and tokens; Sign, a token
//     signed with any key; Keys, the RSA keys tests sign with;
//   - storage.go: the example storage with keys that rotate, expired
//     tokens on request, and JWT access tokens.
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
)

const (
	// ClientID is the client whose client credentials grant gives the
	// tokens: the example's service user. It is their "sub" and "aud".
	ClientID     = "sid1"
	clientSecret = "verysecret"
	// ScopeExpired, asked for, gives a token that expired an hour ago.
	ScopeExpired = "test:expired"
)

// Keys are three RSA keys made once per test binary: 2048-bit keys take
// a while under -race. A provider starts signing with Keys()[0]; a test
// rotates to another, or signs with one the provider never published.
var Keys = sync.OnceValue(func() []*rsa.PrivateKey {
	keys := make([]*rsa.PrivateKey, 3)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	return keys
})

// Provider is a running OpenID provider that a test can stop, start again
// on the same address, and make rotate its signing key. It stops when the
// test ends.
type Provider struct {
	t       testing.TB
	url     string
	addr    string
	storage *keyStorage
	handler http.Handler
	client  *http.Client

	keyFetches atomic.Int64
	keysGate   atomic.Pointer[chan struct{}] // when set, a request for the keys waits until it is closed

	mu  sync.Mutex
	srv *http.Server
}

// Start starts a provider on a free loopback port, signing with Keys()[0].
func Start(t testing.TB) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, ln.Addr().String())
	p.serve(ln)
	return p
}

// Stopped is a provider on a free loopback port that answers nothing
// until its Start: an issuer down from the start.
func Stopped(t testing.TB) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return newProvider(t, addr)
}

func newProvider(t testing.TB, addr string) *Provider {
	t.Helper()
	issuer := "http://" + addr
	first := Key{ID: "key-" + rand.Text()[:8], Private: Keys()[0]}
	st := &keyStorage{Storage: storage.NewStorage(storage.NewUserStore(issuer)), signing: first, published: []Key{first}}
	provider, err := op.NewProvider(&op.Config{CryptoKey: sha256.Sum256([]byte(issuer))}, st, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{t: t, url: issuer, addr: addr, storage: st, client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}}
	p.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keys" {
			p.keyFetches.Add(1)
			if gate := p.keysGate.Load(); gate != nil {
				<-*gate
			}
		}
		provider.ServeHTTP(w, r)
	})
	t.Cleanup(func() {
		p.Stop()
		p.client.CloseIdleConnections()
	})
	return p
}

// URL is the provider's issuer URL, as its tokens' "iss" spells it.
func (p *Provider) URL() string { return p.url }

func (p *Provider) serve(ln net.Listener) {
	srv := &http.Server{Handler: p.handler, ReadHeaderTimeout: 5 * time.Second}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go srv.Serve(ln)
}

// Stop closes the provider's listener and connections: it answers nothing
// until Start. Stopping a stopped provider does nothing.
func (p *Provider) Stop() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Start serves again on the provider's address, trying for up to 5 s
// while the port is not free yet.
func (p *Provider) Start() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.serve(ln)
			return
		}
	}
	p.t.Fatalf("listen again on %s within 5 s: %v", p.addr, err)
}

// Rotate makes key, under a new key id, the one the provider signs with.
// It publishes it, and the keys published before too if keepOld.
func (p *Provider) Rotate(key *rsa.PrivateKey, keepOld bool) Key {
	k := Key{ID: "key-" + rand.Text()[:8], Private: key}
	p.storage.rotate(k, keepOld)
	return k
}

// SigningKey is the key the provider signs with now.
func (p *Provider) SigningKey() Key { return p.storage.signingKey() }

// KeyFetches is how many requests for its keys (the JWKS) the provider
// has had.
func (p *Provider) KeyFetches() int64 { return p.keyFetches.Load() }

// HoldKeys makes each request for the provider's keys wait, until the
// function it returns is called.
func (p *Provider) HoldKeys() (release func()) {
	gate := make(chan struct{})
	p.keysGate.Store(&gate)
	return sync.OnceFunc(func() {
		p.keysGate.Store(nil)
		close(gate)
	})
}

// Token asks the provider's token endpoint for an access token of the
// service user, with scopes, and fails the test if it gives none.
func (p *Provider) Token(scopes ...string) string {
	p.t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {ClientID}, "client_secret": {clientSecret}}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	resp, err := p.client.PostForm(p.url+"/oauth/token", form)
	if err != nil {
		p.t.Fatalf("token endpoint: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.AccessToken == "" {
		p.t.Fatalf("token endpoint: %s: %v %s %s", resp.Status, err, body.Error, body.Description)
	}
	if strings.Count(body.AccessToken, ".") != 2 {
		p.t.Fatalf("the provider's access token is not a JWT: %.20s...", body.AccessToken)
	}
	return body.AccessToken
}

// Sign makes a JWT of claims, signed with key by RS256 under kid (no kid
// when empty): a token as the provider would make it, or as a forger
// would.
func Sign(t testing.TB, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	opts := &jose.SignerOptions{}
	if kid != "" {
		opts.WithHeader("kid", kid)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, opts.WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
