package intake

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestServerErrorLogHidesAddresses(t *testing.T) {
	var buf bytes.Buffer
	l := serverErrorLog(slog.NewTextHandler(&buf, nil))
	l.Printf("http: TLS handshake error from 192.0.2.17:51234: EOF")
	l.Printf("http: TLS handshake error from [2001:db8::1]:443: remote error")
	l.Printf("http: superfluous response.WriteHeader call")
	out := buf.String()
	for _, addr := range []string{"192.0.2.17", "51234", "2001:db8"} {
		if strings.Contains(out, addr) {
			t.Errorf("the log holds %s:\n%s", addr, out)
		}
	}
	if strings.Count(out, "from a client") != 2 || !strings.Contains(out, "superfluous") || !strings.Contains(out, "level=WARN") {
		t.Errorf("log lines lost or changed:\n%s", out)
	}
}
