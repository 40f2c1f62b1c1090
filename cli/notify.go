package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
)

// The service manager's readiness protocol (sd_notify(3)), without
// libsystemd: a daemon started by systemd with Type=notify finds a datagram
// socket's address in NOTIFY_SOCKET and sends it newline-separated
// assignments. READY=1 says the daemon serves, STOPPING=1 that it began to
// stop. Outside systemd NOTIFY_SOCKET is unset and nothing is sent.

// notifySocketEnv names the variable systemd sets for a Type=notify service.
const notifySocketEnv = "NOTIFY_SOCKET"

// sdNotify sends state to the socket NOTIFY_SOCKET names. It returns
// false, nil when the variable is unset (not run by systemd, or not with
// Type=notify). An address starting with '@' is Linux's abstract namespace.
func sdNotify(state string) (bool, error) {
	addr := os.Getenv(notifySocketEnv)
	if addr == "" {
		return false, nil
	}
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
		// systemd also passes vsock addresses to virtual machines; a
		// daemon on a host never gets one.
		return false, fmt.Errorf("%s=%q: not a unix socket path", notifySocketEnv, addr)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("%s: %w", notifySocketEnv, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("%s: %w", notifySocketEnv, err)
	}
	return true, nil
}

// notifyReady tells systemd that the daemon serves, and that it stops once
// ctx ends. A failure to tell it is logged: with Type=notify, systemd then
// times the start out, which the log explains.
func notifyReady(ctx context.Context, log *slog.Logger, component string) {
	sent, err := sdNotify("READY=1")
	if err != nil {
		log.LogAttrs(ctx, slog.LevelError, "cannot tell systemd the daemon is ready",
			slog.String("component", component), slog.String("error", err.Error()))
		return
	}
	if !sent {
		return
	}
	go func() {
		<-ctx.Done()
		_, _ = sdNotify("STOPPING=1")
	}()
}
