package chaos

import (
	"context"
	"fmt"
	"strings"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a TCP proxy, run in the test's own process, that sits on one
// link (projector to PostgreSQL, intake to Redis) and can slow it down or
// cut it.
type Proxy struct {
	p *toxiproxy.Proxy
}

// NewProxy starts a proxy on a free port of 127.0.0.1 that forwards to
// upstream. Close stops it.
func NewProxy(name, upstream string) (*Proxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	return &Proxy{p: p}, nil
}

// Addr is the proxy's listening address, the same after Cut and Restore.
func (x *Proxy) Addr() string {
	x.p.Lock()
	defer x.p.Unlock()
	return x.p.Listen
}

// AddLatency delays the data in both directions by latency ± jitter
// milliseconds, until RemoveLatency.
func (x *Proxy) AddLatency(latencyMS, jitterMS int) error {
	for _, dir := range []string{"upstream", "downstream"} {
		js := fmt.Sprintf(`{"name":"latency_%s","type":"latency","stream":%q,"attributes":{"latency":%d,"jitter":%d}}`,
			dir, dir, latencyMS, jitterMS)
		if _, err := x.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			return fmt.Errorf("add latency: %w", err)
		}
	}
	return nil
}

// RemoveLatency removes what AddLatency added.
func (x *Proxy) RemoveLatency() error {
	for _, dir := range []string{"upstream", "downstream"} {
		if err := x.p.Toxics.RemoveToxic(context.Background(), "latency_"+dir); err != nil {
			return fmt.Errorf("remove latency: %w", err)
		}
	}
	return nil
}

// ResetPeers makes the proxy answer the next data on every connection with
// a TCP reset (connections opened meanwhile too), until StopResetPeers.
func (x *Proxy) ResetPeers() error {
	_, err := x.p.Toxics.AddToxicJson(strings.NewReader(`{"name":"reset","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`))
	if err != nil {
		return fmt.Errorf("add reset_peer: %w", err)
	}
	return nil
}

// StopResetPeers removes what ResetPeers added.
func (x *Proxy) StopResetPeers() error {
	if err := x.p.Toxics.RemoveToxic(context.Background(), "reset"); err != nil {
		return fmt.Errorf("remove reset_peer: %w", err)
	}
	return nil
}

// Cut disables the proxy: it closes every connection through it and
// refuses new ones until Restore.
func (x *Proxy) Cut() { x.p.Stop() }

// Restore enables the proxy again on the same address.
func (x *Proxy) Restore() error {
	if err := x.p.Start(); err != nil {
		return fmt.Errorf("restore proxy %s: %w", x.p.Name, err)
	}
	return nil
}

// Close stops the proxy and closes its connections.
func (x *Proxy) Close() { x.p.Stop() }
