package intake

import (
	"log"
	"log/slog"
	"regexp"
)

// serverErrorLog is net/http's error log for intake's server: through
// slog at warning level, with every client address taken out. net/http
// names the client in some lines ("http: TLS handshake error from
// 192.0.2.1:51234: EOF"), and tally logs no client address anywhere.
func serverErrorLog(h slog.Handler) *log.Logger {
	return log.New(addrRedactor{slog.NewLogLogger(h, slog.LevelWarn)}, "", 0)
}

// clientAddr matches "from HOST:PORT", IPv4 or bracketed IPv6.
var clientAddr = regexp.MustCompile(`from (\[[0-9A-Fa-f:.%\w]*\]|[0-9.]+):\d+`)

type addrRedactor struct{ out *log.Logger }

func (w addrRedactor) Write(p []byte) (int, error) {
	w.out.Print(string(clientAddr.ReplaceAll(p, []byte("from a client"))))
	return len(p), nil
}
