package credential_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"

	"tally/credential"
)

// The OpenID provider of these tests is zitadel/oidc's (pkg/op) with its
// example storage, on a loopback port. Tokens come from its token
// endpoint by the client credentials grant of the example's service user
// "sid1", as JWT access tokens (subject and audience "sid1"). What the
// tests change is storage, as an operator's would be: the signing keys
// (so that the provider can rotate them) and, for a token asked for with
// the scope scopeExpired, the expiry.
const (
	opClient       = "sid1"
	opClientSecret = "verysecret"
	scopeExpired   = "test:expired"
)

// rsaKeys are a few RSA keys made once: 2048-bit keys take a while under
// -race, and a key is used by one provider at most once in a test.
var rsaKeys = sync.OnceValue(func() []*rsa.PrivateKey {
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

// opKey is a signing key of the provider: it signs with the private key
// and publishes the public one.
type opKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k opKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k opKey) Key() any                                    { return k.key }
func (k opKey) ID() string                                  { return k.id }

type opPublicKey struct{ opKey }

func (k opPublicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k opPublicKey) Use() string                        { return "sig" }
func (k opPublicKey) Key() any                           { return &k.key.PublicKey }

// opStorage is the example storage with keys that rotate, tokens that can
// be asked for expired, and the service user's access tokens as JWTs.
type opStorage struct {
	*storage.Storage
	mu        sync.Mutex
	signing   opKey
	published []opKey
}

func (s *opStorage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signing, nil
}

func (s *opStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *opStorage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, len(s.published))
	for i, k := range s.published {
		keys[i] = opPublicKey{k}
	}
	return keys, nil
}

func (s *opStorage) ClientCredentials(ctx context.Context, id, secret string) (op.Client, error) {
	c, err := s.Storage.ClientCredentials(ctx, id, secret)
	if err != nil {
		return nil, err
	}
	return jwtAccessTokens{c}, nil
}

type jwtAccessTokens struct{ op.Client }

func (jwtAccessTokens) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

func (s *opStorage) CreateAccessToken(ctx context.Context, req op.TokenRequest) (string, time.Time, error) {
	id, exp, err := s.Storage.CreateAccessToken(ctx, req)
	if slices.Contains(req.GetScopes(), scopeExpired) {
		exp = time.Now().Add(-2 * credential.Leeway)
	}
	return id, exp, err
}

// testOP is a running OpenID provider that a test can stop, start again
// on the same address, and make rotate its signing key.
type testOP struct {
	t       testing.TB
	issuer  string
	addr    string
	storage *opStorage
	handler http.Handler
	client  *http.Client

	jwksFetches atomic.Int64
	jwksGate    atomic.Pointer[chan struct{}] // when set, a JWKS request waits until it is closed

	mu  sync.Mutex
	srv *http.Server
}

// startOP starts a provider signing with rsaKeys()[0].
func startOP(t testing.TB) *testOP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := newOP(t, ln.Addr().String())
	p.serve(ln)
	return p
}

// newOP makes a provider for addr without starting it.
func newOP(t testing.TB, addr string) *testOP {
	t.Helper()
	issuer := "http://" + addr
	first := opKey{id: "key-" + rand.Text()[:8], key: rsaKeys()[0]}
	st := &opStorage{Storage: storage.NewStorage(storage.NewUserStore(issuer)), signing: first, published: []opKey{first}}
	provider, err := op.NewProvider(&op.Config{CryptoKey: sha256.Sum256([]byte(issuer))}, st, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	p := &testOP{t: t, issuer: issuer, addr: addr, storage: st, client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}}
	p.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keys" {
			p.jwksFetches.Add(1)
			if gate := p.jwksGate.Load(); gate != nil {
				<-*gate
			}
		}
		provider.ServeHTTP(w, r)
	})
	t.Cleanup(func() {
		p.stop()
		p.client.CloseIdleConnections()
	})
	return p
}

func (p *testOP) serve(ln net.Listener) {
	srv := &http.Server{Handler: p.handler, ReadHeaderTimeout: 5 * time.Second}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go srv.Serve(ln)
}

// stop closes the provider's listener and connections: it answers nothing.
func (p *testOP) stop() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// start serves again on the provider's address.
func (p *testOP) start() {
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

// rotate makes key the one the provider signs with; it publishes it, and
// the old keys too if keepOld.
func (p *testOP) rotate(key *rsa.PrivateKey, keepOld bool) opKey {
	k := opKey{id: "key-" + rand.Text()[:8], key: key}
	p.storage.mu.Lock()
	defer p.storage.mu.Unlock()
	p.storage.signing = k
	if keepOld {
		p.storage.published = append(p.storage.published, k)
	} else {
		p.storage.published = []opKey{k}
	}
	return k
}

// signingKey is the key the provider signs with now.
func (p *testOP) signingKey() opKey {
	p.storage.mu.Lock()
	defer p.storage.mu.Unlock()
	return p.storage.signing
}

// token asks the provider's token endpoint for an access token of the
// service user, with scopes.
func (p *testOP) token(scopes ...string) string {
	p.t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {opClient}, "client_secret": {opClientSecret}}
	if len(scopes) > 0 {
		form.Set("scope", strings.Join(scopes, " "))
	}
	resp, err := p.client.PostForm(p.issuer+"/oauth/token", form)
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

// tokenParts are a token's header and claims, read without verifying.
type tokenParts struct {
	Header map[string]any
	Claims map[string]any
	// the three parts as they are in the token
	rawHeader, rawClaims, rawSig string
}

func parts(t testing.TB, token string) tokenParts {
	t.Helper()
	s := strings.Split(token, ".")
	if len(s) != 3 {
		t.Fatalf("token has %d parts", len(s))
	}
	tp := tokenParts{rawHeader: s[0], rawClaims: s[1], rawSig: s[2]}
	for i, v := range []*map[string]any{&tp.Header, &tp.Claims} {
		raw, err := base64.RawURLEncoding.DecodeString(s[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatal(err)
		}
	}
	return tp
}

// sign makes a token of claims, signed with key by RS256 under kid (no kid
// when empty).
func sign(t testing.TB, key *rsa.PrivateKey, kid string, claims map[string]any) string {
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

// issuerFor runs an OIDCIssuer for p's issuer URL until the test ends.
// Unset intervals are short, for tests.
func runIssuer(t testing.TB, cfg credential.OIDCConfig) *credential.OIDCIssuer {
	t.Helper()
	if cfg.Audience == "" {
		cfg.Audience = opClient
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin = 20 * time.Millisecond
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	cfg.HTTPClient = client
	o, err := credential.NewOIDCIssuer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5 s of its context's end")
		}
		client.CloseIdleConnections()
	})
	return o
}

// eventually calls check until it returns nil, and fails the test if it
// does not within d.
func eventually(t testing.TB, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %v", what, d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// verifies returns a check that token verifies with v.
func verifies(v *credential.Verifier, token string) func() error {
	return func() error {
		_, err := v.Verify(context.Background(), token)
		return err
	}
}

// logRecords collects the messages a logger is given.
type logRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecords) logger() *slog.Logger {
	return slog.New(l)
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.msgs = append(l.msgs, b.String())
	l.mu.Unlock()
	return nil
}

// count is how many messages hold s.
func (l *logRecords) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}
