package intake

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// This file owns net/http's error log of intake's servers: the errors of
// connections rather than requests (a TLS handshake that failed, an
// HTTP/2 preface that was not one, a failed accept). A client chooses how
// many of those it causes, so each is counted by kind
// (tally_intake_connection_errors_total) and the log gets, per kind, the
// first at once and then at most one summary per connErrorsEvery, never a
// line each. No line holds a client address: tally logs none anywhere.

// connErrorsEvery is how often the errors of a kind that were only
// counted are logged as one summary.
const connErrorsEvery = time.Minute

// The kinds of connection errors, the label of their counter.
const (
	connErrTLS    = "tls_handshake"
	connErrHTTP2  = "http2"
	connErrAccept = "accept"
	connErrOther  = "other"
)

var connErrKinds = []string{connErrTLS, connErrHTTP2, connErrAccept, connErrOther}

// connErrorKind is what a connErrors holds of one kind in the current
// period.
type connErrorKind struct {
	logged     bool   // the kind's first error of the period was logged
	suppressed int    // errors counted but not logged since
	last       string // the last of them, its addresses taken out
}

// connErrors counts and logs connection errors, as the file says.
type connErrors struct {
	log     *slog.Logger
	counted *prometheus.CounterVec // kind

	mu    sync.Mutex
	kinds map[string]*connErrorKind
}

func newConnErrors(log *slog.Logger, counted *prometheus.CounterVec) *connErrors {
	c := &connErrors{log: log, counted: counted, kinds: map[string]*connErrorKind{}}
	for _, k := range connErrKinds {
		c.kinds[k] = &connErrorKind{}
		counted.WithLabelValues(k)
	}
	return c
}

// logger is the log.Logger an http.Server writes its errors to.
func (c *connErrors) logger() *log.Logger { return log.New(c, "", 0) }

// Write takes one line of net/http's error log.
func (c *connErrors) Write(p []byte) (int, error) {
	msg := withoutAddrs(strings.TrimSpace(string(p)))
	kind := connErrKind(msg)
	c.counted.WithLabelValues(kind).Inc()
	c.mu.Lock()
	k := c.kinds[kind]
	first := !k.logged
	if first {
		k.logged = true
	} else {
		k.suppressed++
		k.last = msg
	}
	c.mu.Unlock()
	if first {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, msg, slog.String("kind", kind),
			slog.String("note", fmt.Sprintf("more of this kind are counted in tally_intake_connection_errors_total and summed up here once every %s", connErrorsEvery)))
	}
	return len(p), nil
}

// run logs the summaries every connErrorsEvery until ctx ends, and once
// more as it ends.
func (c *connErrors) run(ctx context.Context) {
	t := time.NewTicker(connErrorsEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.summarize()
		case <-ctx.Done():
			c.summarize()
			return
		}
	}
}

// summarize logs, per kind, the errors counted but not logged in the
// period, and starts a new one.
func (c *connErrors) summarize() {
	c.mu.Lock()
	type summary struct {
		kind, last string
		n          int
	}
	var out []summary
	for _, kind := range connErrKinds {
		k := c.kinds[kind]
		if k.suppressed > 0 {
			out = append(out, summary{kind, k.last, k.suppressed})
		}
		*k = connErrorKind{}
	}
	c.mu.Unlock()
	for _, s := range out {
		c.log.LogAttrs(context.Background(), slog.LevelWarn, "connection errors not logged one by one",
			slog.String("kind", s.kind), slog.Int("count", s.n), slog.Duration("within", connErrorsEvery), slog.String("last", s.last))
	}
}

// connErrKind is the kind of a line of net/http's error log.
func connErrKind(msg string) string {
	switch {
	case strings.Contains(msg, "TLS handshake error"):
		return connErrTLS
	case strings.Contains(msg, "http2:"), strings.Contains(msg, "preface"):
		return connErrHTTP2
	case strings.Contains(msg, "Accept error"):
		return connErrAccept
	}
	return connErrOther
}

// addrPattern matches an IPv4 address or a bracketed IPv6 one, with or
// without a port, and a bare IPv6 address of two groups or more.
var addrPattern = regexp.MustCompile(`\[[0-9A-Fa-f:.%\w]*\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b|\b[0-9A-Fa-f]{0,4}(:[0-9A-Fa-f]{0,4}){2,7}\b`)

// withoutAddrs is msg with every address replaced by "[address]".
func withoutAddrs(msg string) string {
	return addrPattern.ReplaceAllString(msg, "[address]")
}
