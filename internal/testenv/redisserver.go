package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-retry"
)

// RedisServer is a private redis-server of one test, which the test may
// stop and start again. Its data directory lives under t.TempDir(); it
// runs with appendonly yes and appendfsync always, the durability tally
// documents.
type RedisServer struct {
	t    testing.TB
	Addr string // 127.0.0.1:PORT, the same across restarts
	dir  string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartRedis starts a private redis-server on a free loopback port. It is
// killed when t ends. The test fails when redis-server is not installed.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed (apt-get install redis-server): %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	s := &RedisServer{t: t, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return "redis://" + s.Addr + "/0" }

// Start starts the server (again) and waits until it answers PING.
func (s *RedisServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command("redis-server",
		"--bind", "127.0.0.1", "--port", port, "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	// It answers PING within moments; 10s covers a loaded machine.
	b := retry.WithMaxDuration(10*time.Second, retry.NewConstant(20*time.Millisecond))
	err := retry.Do(context.Background(), b, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return retry.RetryableError(rdb.Ping(ctx).Err())
	})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		s.t.Fatalf("redis-server on %s did not answer within 10s: %v\n%s", s.Addr, err, log)
	}
}

// Kill stops the server with SIGKILL, as a crash would, and waits for it.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server and starts it again on the same port and data.
func (s *RedisServer) Restart() {
	s.Kill()
	s.Start()
}

// FreeAddr returns a loopback address ("127.0.0.1:port") whose port was
// free a moment ago and that no earlier call in this process returned. The
// kernel hands a just-closed port out again readily, so without the second
// rule two daemons started one after the other could be given the same
// port and one of them would fail to listen.
func FreeAddr() (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

func freePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("listen: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port that this process has not handed out already in 100 tries")
}
