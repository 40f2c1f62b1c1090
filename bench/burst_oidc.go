package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/sethvargo/go-retry"

	"tally/ledger"
)

// This file owns B-OIDC's issuer: a minimal OpenID Connect issuer on a
// loopback port (its discovery document and a JWKS of one RSA-2048 key)
// that signs one RS256 token per voter with go-jose/v4. Its voters are
// credential.PrincipalIDFor(issuer, subject) and have no rows in
// principals, as OpenID Connect principals have none.

// burstOIDCAudience is the audience of B-OIDC's tokens and intake's
// --oidc-audience.
const burstOIDCAudience = "tally-bench"

// oidcIssuer serves the discovery document and the keys and signs the
// tokens; close stops its server.
type oidcIssuer struct {
	url    string // as the tokens' "iss" and intake's --oidc-issuer spell it
	signer jose.Signer
	srv    *http.Server
}

func newOIDCIssuer() (*oidcIssuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	kid := "bench-" + rand.Text()[:8]
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &oidcIssuer{url: "http://" + ln.Addr().String(), signer: signer}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: kid, Algorithm: string(jose.RS256), Use: "sig"}}})
	if err != nil {
		ln.Close()
		return nil, err
	}
	discovery, err := json.Marshal(map[string]any{
		"issuer": o.url, "jwks_uri": o.url + "/keys",
		"id_token_signing_alg_values_supported": []string{string(jose.RS256)},
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	serve := func(body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		}
	}
	mux.HandleFunc("GET /.well-known/openid-configuration", serve(discovery))
	mux.HandleFunc("GET /keys", serve(jwks))
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go o.srv.Serve(ln)
	return o, nil
}

func (o *oidcIssuer) close() { o.srv.Close() }

// issue signs a token for each principal, its name the subject, an hour
// ahead of its expiry; createdAt is not in them (an OpenID Connect token
// carries no creation time of its principal). The tokens are signed on
// every core.
func (o *oidcIssuer) issue(ps []ledger.Principal, _ time.Time) ([]string, error) {
	tokens := make([]string, len(ps))
	now := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(ps); i += workers {
				tok, err := o.sign(ps[i].Name, now)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				tokens[i] = tok
			}
		})
	}
	wg.Wait()
	return tokens, errors.Join(errs...)
}

func (o *oidcIssuer) sign(sub string, now time.Time) (string, error) {
	payload, err := json.Marshal(map[string]any{
		"iss": o.url, "sub": sub, "aud": burstOIDCAudience,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	if err != nil {
		return "", err
	}
	jws, err := o.signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

func (o *oidcIssuer) intakeFlags() []string {
	return []string{"--oidc-issuer", o.url, "--oidc-audience", burstOIDCAudience}
}

func (o *oidcIssuer) shownFlags() []string {
	return []string{"--oidc-issuer", "URL", "--oidc-audience", burstOIDCAudience}
}

func (o *oidcIssuer) describe() string {
	return "an RS256 JWT of a local OpenID Connect issuer (go-jose/v4; intake's --oidc-issuer)"
}

func (o *oidcIssuer) rows() bool { return false }

func (o *oidcIssuer) readyCheck() string { return "oidc" }

// waitReadyCheck waits until intake's /readyz at addr shows check "ok",
// for at most 15s.
func waitReadyCheck(ctx context.Context, addr, check string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	var last string
	err := retry.Do(ctx, retry.WithMaxDuration(15*time.Second, retry.NewConstant(50*time.Millisecond)), func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return retry.RetryableError(err)
		}
		defer resp.Body.Close()
		var rd struct {
			Checks map[string]string `json:"checks"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&rd); err != nil {
			return retry.RetryableError(err)
		}
		if last = rd.Checks[check]; last != "ok" {
			return retry.RetryableError(fmt.Errorf("check %s is %q", check, last))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("intake's /readyz did not show %s ok within 15s: %w", check, err)
	}
	return nil
}
