package intake

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// This file owns TLS (Config.TLSCertFile, Config.TLSKeyFile): the
// tls.Config Serve hands to http.Server, and the certificate reloader that
// picks up a certificate rotated on disk without a restart.

// tlsReloadEvery is how often a handshake may check the files' modification
// times: at most once a second, so a flood of handshakes costs no stat
// calls.
const tlsReloadEvery = time.Second

// tls12Suites are the cipher suites intake offers over TLS 1.2: ECDHE
// with an AEAD only (AES-GCM or ChaCha20-Poly1305), none of Go's CBC
// suites with SHA-1 or SHA-256 MACs. TLS 1.3's suites are fixed, and all
// AEAD.
var tls12Suites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// newTLSConfig loads the key pair and returns the server's TLS settings:
// TLS 1.2 (AEAD suites only) or later, HTTP/2 or HTTP/1.1 by ALPN, and
// the reloader's current certificate. A file that is missing or unreadable is an error naming it.
func newTLSConfig(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.load(time.Now()); err != nil {
		return nil, fmt.Errorf("intake: TLS: %w (check the TLS certificate and key files)", err)
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   tls12Suites,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: r.getCertificate,
	}, nil
}

// certReloader holds the last good key pair and reloads it when either
// file's modification time changed, checked at most every tlsReloadEvery.
// A reload that fails keeps the last good pair and is logged once per
// change of the files.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	mod       [2]time.Time // of certFile and keyFile, when cert was loaded
	failed    [2]time.Time // of the files whose reload failed last, logged once
	checkedAt time.Time
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.checkedAt) < tlsReloadEvery {
		return r.cert, nil
	}
	r.checkedAt = now
	mod, err := r.modTimes()
	if err == nil && mod == r.mod {
		return r.cert, nil
	}
	if err == nil {
		err = r.loadPair(mod)
	}
	if err != nil && mod != r.failed {
		r.failed = mod
		r.log.LogAttrs(context.Background(), slog.LevelError, "TLS certificate reload failed; serving the last good certificate",
			slog.String("cert_file", r.certFile), slog.String("key_file", r.keyFile), slog.String("error", err.Error()))
	}
	return r.cert, nil
}

// load reads the key pair for the first time.
func (r *certReloader) load(now time.Time) error {
	mod, err := r.modTimes()
	if err != nil {
		return err
	}
	r.checkedAt = now
	return r.loadPair(mod)
}

// loadPair reads and parses both files; on success the pair becomes the
// one served. Called with mu held, or before the reloader is shared.
func (r *certReloader) loadPair(mod [2]time.Time) error {
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("load the key pair of %s and %s: %w", r.certFile, r.keyFile, err)
	}
	if r.cert != nil {
		r.log.LogAttrs(context.Background(), slog.LevelInfo, "TLS certificate reloaded",
			slog.String("cert_file", r.certFile), slog.String("key_file", r.keyFile))
	}
	r.cert, r.mod, r.failed = &pair, mod, [2]time.Time{}
	return nil
}

// modTimes returns the modification times of the certificate and key
// files; an error names the file that cannot be read.
func (r *certReloader) modTimes() ([2]time.Time, error) {
	var mod [2]time.Time
	for i, name := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return mod, fmt.Errorf("cannot read a TLS file: %w", err)
		}
		mod[i] = fi.ModTime()
	}
	return mod, nil
}
