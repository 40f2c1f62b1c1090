package cli

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tally/internal/testenv"
)

// notifyListener is the service manager's end of NOTIFY_SOCKET: a datagram
// socket at addr ('@' first: in the abstract namespace).
func notifyListener(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// receive reads one datagram, waiting at most wait.
func receive(t *testing.T, conn *net.UnixConn, wait time.Duration) (string, error) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	return string(buf[:n]), err
}

// sdNotify writes the state as one datagram to the socket NOTIFY_SOCKET
// names, a path or an abstract address; without the variable it sends
// nothing and says so; an address of another kind is an error. Not
// parallel: it sets the environment.
func TestSdNotify(t *testing.T) {
	for _, addr := range []string{
		filepath.Join(t.TempDir(), "notify"),
		"@tally-notify-test-" + strings.ReplaceAll(t.Name(), "/", "-") + time.Now().Format("150405.000000000"),
	} {
		conn := notifyListener(t, addr)
		t.Setenv(notifySocketEnv, addr)
		sent, err := sdNotify("READY=1")
		if !sent || err != nil {
			t.Fatalf("NOTIFY_SOCKET=%s: sent %v, %v; want sent", addr, sent, err)
		}
		if got, err := receive(t, conn, 5*time.Second); err != nil || got != "READY=1" {
			t.Fatalf("NOTIFY_SOCKET=%s: received %q, %v; want READY=1", addr, got, err)
		}
	}

	t.Setenv(notifySocketEnv, "")
	if sent, err := sdNotify("READY=1"); sent || err != nil {
		t.Errorf("without NOTIFY_SOCKET: sent %v, %v; want nothing sent and no error", sent, err)
	}
	t.Setenv(notifySocketEnv, "vsock:2:1234")
	if sent, err := sdNotify("READY=1"); sent || err == nil {
		t.Errorf("NOTIFY_SOCKET=vsock:2:1234: sent %v, %v; want an error", sent, err)
	}
	t.Setenv(notifySocketEnv, filepath.Join(t.TempDir(), "nobody-listens"))
	if sent, err := sdNotify("READY=1"); sent || err == nil {
		t.Errorf("NOTIFY_SOCKET naming no socket: sent %v, %v; want an error", sent, err)
	}
}

// Under systemd's Type=notify, tally projector says READY=1 once its
// /metrics and /healthz listener answers, and STOPPING=1 when it is told
// to stop. Not parallel: it sets the environment.
func TestProjectorNotifiesSystemd(t *testing.T) {
	addr := filepath.Join(t.TempDir(), "notify")
	conn := notifyListener(t, addr)
	t.Setenv(notifySocketEnv, addr)
	f := newStreamFixture(t, "u1")
	metrics, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	var ready, stopping string
	healthz := -1
	f.runProjector([]string{"--consumer", "cli-notify", "--metrics-listen", metrics, "--batch-wait", "10ms",
		"--database-url", testenv.DaemonLogin(t, f.db), "--redis-url", testenv.RedisURL(),
		"--stream-prefix", f.prefix, "--log-format", "text"},
		func() bool {
			if ready == "" {
				got, err := receive(t, conn, 20*time.Second)
				if err != nil {
					t.Fatalf("no notification from the projector: %v", err)
				}
				ready = got
				// Ready means serving: asked at once, /healthz answers.
				if resp, err := http.Get("http://" + metrics + "/healthz"); err == nil {
					healthz = resp.StatusCode
					resp.Body.Close()
				}
			}
			return true
		})
	stopping, err = receive(t, conn, 5*time.Second)
	if ready != "READY=1" || healthz != http.StatusOK {
		t.Errorf("first notification %q, /healthz right after it %d; want READY=1 and 200", ready, healthz)
	}
	if err != nil || stopping != "STOPPING=1" {
		t.Errorf("notification once stopped: %q, %v; want STOPPING=1", stopping, err)
	}
}

// Under systemd's Type=notify, tally intake says READY=1 once it listens:
// asked at once, /healthz answers on both its listeners; and STOPPING=1
// when it is told to stop. Not parallel: it sets the environment.
func TestIntakeNotifiesSystemd(t *testing.T) {
	addr := filepath.Join(t.TempDir(), "notify")
	conn := notifyListener(t, addr)
	t.Setenv(notifySocketEnv, addr)
	db := testenv.Postgres(t)
	_, prefix := testenv.Redis(t)
	listen, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	daemonURL := testenv.DaemonLogin(t, db)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done, errOut := runBackground(ctx, "intake", "--listen", listen, "--admin-listen", admin, "--database-url", daemonURL,
		"--redis-url", testenv.RedisURL(), "--stream-prefix", prefix, "--log-format", "text")
	ready, err := receive(t, conn, 20*time.Second)
	if err != nil || ready != "READY=1" {
		stop()
		t.Fatalf("first notification %q, %v; want READY=1; intake's log:\n%s", ready, err, errOut.String())
	}
	for _, a := range []string{listen, admin} {
		resp, err := http.Get("http://" + a + "/healthz")
		if err != nil {
			t.Errorf("/healthz on %s right after READY=1: %v", a, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/healthz on %s right after READY=1: %s", a, resp.Status)
		}
	}
	stop()
	if stopping, err := receive(t, conn, 5*time.Second); err != nil || stopping != "STOPPING=1" {
		t.Errorf("notification once stopped: %q, %v; want STOPPING=1", stopping, err)
	}
	if code := testenv.Receive(t, done, 15*time.Second, "intake to stop once its context ended"); code != 0 {
		t.Errorf("intake exited %d:\n%s", code, errOut.String())
	}
}
