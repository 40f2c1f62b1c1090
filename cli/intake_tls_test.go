package cli

import (
	"strings"
	"testing"
)

// TestIntakeTLSFlagsGoTogether checks tally intake refuses --tls-cert
// without --tls-key (and the reverse) before it connects anywhere.
func TestIntakeTLSFlagsGoTogether(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"intake", "--tls-cert", "cert.pem"},
		{"intake", "--tls-key", "key.pem"},
	} {
		// An unreachable database: the flags are checked before connecting.
		r := tally(t, "postgres://postgres@127.0.0.1:1/none?connect_timeout=1", append(args, "--startup-wait", "0s")...)
		if r.code != ExitError || !strings.Contains(r.stderr, "--tls-cert: the TLS certificate and key files go together") {
			t.Errorf("tally %v: exit %d, stderr %q; want exit 2 saying the flags go together", args, r.code, r.stderr)
		}
	}
}
