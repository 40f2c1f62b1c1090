package intake_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/intake"
	"tally/internal/testenv"
	"tally/ledger"
	"tally/stream"
)

// testCert is a self-signed certificate for 127.0.0.1 written to dir as
// cert.pem and key.pem.
type testCert struct {
	certFile, keyFile string
	leaf              *x509.Certificate
}

func writeTestCert(t *testing.T, dir, cn string, serial int64) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	c := testCert{certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"), leaf: leaf}
	if err := os.WriteFile(c.keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// serveTLS serves an intake with cert on a fresh database and Redis
// prefix, with a principal and the open poll "p1"; it returns the bundle
// whose url is https and whose client trusts cert and speaks HTTP/2.
func serveTLS(t *testing.T, cert testCert) *bundle {
	t.Helper()
	b := setup(t, func(c *config) { c.TLSCertFile, c.TLSKeyFile = cert.certFile, cert.keyFile })
	tr := &http.Transport{TLSClientConfig: clientTLS(cert), ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections) // before setup's cleanup stops the server
	b.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	b.url = "https://" + strings.TrimPrefix(b.url, "http://")
	return b
}

// clientTLS trusts cert only.
func clientTLS(cert testCert) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(cert.leaf)
	return &tls.Config{RootCAs: pool}
}

// TestTLSVoteOverHTTP2 sends a vote over HTTPS and checks it was
// answered 202 over HTTP/2.
func TestTLSVoteOverHTTP2(t *testing.T) {
	t.Parallel()
	b := serveTLS(t, writeTestCert(t, t.TempDir(), "intake-1", 1))
	req, err := http.NewRequest(http.MethodPost, b.url+"/v1/votes", strings.NewReader(string(voteBody("tls-1", "p1", "a"))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+b.token)
	req.Header.Set("Content-Type", "application/json")
	r := b.send(t, req)
	if r.code != http.StatusAccepted {
		t.Fatalf("status %d, want 202", r.code)
	}
	if r.proto != 2 || !r.tls {
		t.Fatalf("answered over HTTP/%d (TLS %v), want HTTP/2 over TLS", r.proto, r.tls)
	}
	if n := b.xlen(t); n != 1 {
		t.Fatalf("stream holds %d entries, want 1", n)
	}
	// A plain HTTP request on the TLS port gets no vote in.
	plain := &http.Client{Timeout: 5 * time.Second}
	if r, err := plain.Post("http://"+strings.TrimPrefix(b.url, "https://")+"/v1/votes", "application/json", nil); err == nil {
		r.Body.Close()
		if r.StatusCode < 400 {
			t.Fatalf("plain HTTP on the TLS port answered %d", r.StatusCode)
		}
	}
}

// TestTLSRotation replaces the certificate on disk while intake runs: a
// new connection past the reload interval sees the new one, without a
// restart; a broken file then leaves the last good one served.
func TestTLSRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := writeTestCert(t, dir, "intake-first", 1)
	var logs testenv.LogBuffer
	b := serveTLSWith(t, first, slog.New(slog.NewTextHandler(&logs, nil)))
	addr := strings.TrimPrefix(b.url, "https://")
	if got := peerCert(t, addr, first); got == nil || got.SerialNumber.Int64() != 1 {
		t.Fatalf("first certificate: %v, want serial 1", got)
	}
	if r := b.vote(t, b.token, "rot-1", "p1", "a"); r.code != http.StatusAccepted {
		t.Fatalf("vote before rotation: %d %s", r.code, r.raw)
	}
	second := writeTestCert(t, dir, "intake-second", 2)
	testenv.Eventually(t, 5*time.Second, "a new connection sees the rotated certificate", func() bool {
		got := peerCert(t, addr, second)
		return got != nil && got.Subject.CommonName == "intake-second" && got.SerialNumber.Int64() == 2
	})
	// A broken certificate on disk keeps the last good one served.
	if err := os.WriteFile(second.certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	// New connections until one made intake read the broken file, which it
	// logs: the last good certificate is served before and after.
	testenv.Eventually(t, 10*time.Second, "intake to read the broken certificate and log its failure", func() bool {
		if got := peerCert(t, addr, second); got == nil || got.SerialNumber.Int64() != 2 {
			t.Fatalf("after a broken certificate was written: %v, want the last good one (serial 2)", got)
		}
		return strings.Contains(logs.String(), "TLS certificate reload failed")
	})
	for range 2 {
		if got := peerCert(t, addr, second); got == nil || got.SerialNumber.Int64() != 2 {
			t.Fatalf("after a broken certificate was written: %v, want the last good one (serial 2)", got)
		}
	}
	// The connection made before the rotation still carries votes.
	if r := b.vote(t, b.token, "rot-2", "p1", "b"); r.code != http.StatusAccepted {
		t.Fatalf("vote after rotation: %d %s", r.code, r.raw)
	}
}

// peerCert makes a new TLS connection to addr and returns the
// certificate the server presented, nil when the handshake failed (for
// instance when the server still presents a certificate trust does not
// cover).
func peerCert(t *testing.T, addr string, trust testCert) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, clientTLS(trust))
	if err != nil {
		return nil
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// TestTLSRefusesTLS11 checks a client that speaks at most TLS 1.1 gets
// no connection.
func TestTLSRefusesTLS11(t *testing.T) {
	t.Parallel()
	cert := writeTestCert(t, t.TempDir(), "intake-1", 1)
	b := serveTLS(t, cert)
	cfg := clientTLS(cert)
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	conn, err := tls.Dial("tcp", strings.TrimPrefix(b.url, "https://"), cfg)
	if err == nil {
		v := conn.ConnectionState().Version
		conn.Close()
		t.Fatalf("a TLS 1.1 client got a connection (version %#x)", v)
	}
	if !strings.Contains(err.Error(), "version") {
		t.Fatalf("handshake error %q, want a protocol version refusal", err)
	}
	// TLS 1.2 is accepted.
	cfg = clientTLS(cert)
	cfg.MaxVersion = tls.VersionTLS12
	conn, err = tls.Dial("tcp", strings.TrimPrefix(b.url, "https://"), cfg)
	if err != nil {
		t.Fatalf("a TLS 1.2 client: %v", err)
	}
	conn.Close()
}

// TestTLSConfigNeedsBoth checks New refuses a certificate without its key
// and a key without its certificate.
func TestTLSConfigNeedsBoth(t *testing.T) {
	t.Parallel()
	keys, _ := stream.NewKeys("x", 1)
	store, _ := ledger.New(nil, ledger.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, cfg := range []intake.Config{{TLSCertFile: "cert.pem"}, {TLSKeyFile: "key.pem"}} {
		_, err := intake.New(cfg, store, rdb, keys, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "the TLS certificate and key files go together") {
			t.Errorf("New(cert %q, key %q) = %v, want an error that they go together", cfg.TLSCertFile, cfg.TLSKeyFile, err)
		}
	}
}

// TestTLSMissingCert checks a certificate file that does not exist fails
// Serve with the file's name, and closes the listener.
func TestTLSMissingCert(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert := writeTestCert(t, dir, "intake-1", 1)
	missing := filepath.Join(dir, "nope.pem")
	keys, _ := stream.NewKeys("x", 1)
	store, _ := ledger.New(nil, ledger.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	srv, err := intake.New(intake.Config{TLSCertFile: missing, TLSKeyFile: cert.keyFile}, store, rdb, keys, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Serve(context.Background(), ln)
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Serve = %v, want an error naming %s", err, missing)
	}
	if _, err := ln.Accept(); err == nil {
		t.Fatal("the listener is still open after Serve failed")
	}
}
