package credential_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"tally/credential"
	"tally/internal/oidctest"
)

// The OpenID provider of these tests is internal/oidctest's: zitadel/oidc's
// pkg/op with its example storage, on a loopback port. This file holds
// the helpers of the tests that verify its tokens.

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

// runIssuer runs an OIDCIssuer of cfg until the test ends.
// Unset intervals are short, for tests.
func runIssuer(t testing.TB, cfg credential.OIDCConfig) *credential.OIDCIssuer {
	t.Helper()
	if cfg.Audience == "" {
		cfg.Audience = oidctest.ClientID
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
