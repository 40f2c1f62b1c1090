package cli

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"tally/internal/testenv"
)

// TestNewRedisClient: each --redis-mode takes go-redis' URL form of its
// deployment, and a URL of another form is refused saying what to change.
func TestNewRedisClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, url string
		want      string // the client's type, or a part of the error
	}{
		{"single", "redis://127.0.0.1:6379/0", "*redis.Client"},
		{"single", "rediss://u:p@redis.example:6380/2", "*redis.Client"},
		{"single", "unix:///run/redis.sock?db=1", "*redis.Client"},
		{"single", "redis://s1:26379/0?master_name=m", "add --redis-mode sentinel"},
		{"single", "redis://n1:6379?addr=n2:6379", "add --redis-mode cluster"},
		{"single", "http://127.0.0.1:6379", `--redis-url starts with "http:", which is not a scheme it takes`},
		{"sentinel", "redis://s1:26379/0?master_name=m&addr=s2:26379&addr=s3:26379", "*redis.Client"},
		{"sentinel", "redis://s1:26379/0", "needs the master's name"},
		{"sentinel", "redis://s1:26379/0?master_name=m&addr=nope", "unable to parse addr"},
		{"sentinel", "redis://s1:26379/0?master_name=m&cluster=yes", "unexpected option"},
		{"cluster", "redis://n1:6379?addr=n2:6379&addr=n3:6379", "*redis.ClusterClient"},
		{"cluster", "redis://n1:6379/0", "*redis.ClusterClient"},
		{"cluster", "rediss://u:p@n1:6379", "*redis.ClusterClient"},
		{"cluster", "redis://n1:6379/3", "only database 0"},
		{"cluster", "redis://n1:6379?master_name=m", "is for --redis-mode sentinel"},
		{"cluster", "unix:///run/redis.sock", "--redis-mode cluster takes redis://"},
		{"cluster", "redis://n1:6379?addr=n2", "unable to parse addr"},
		{"clustered", "redis://n1:6379", "use single, sentinel or cluster"},
	} {
		rdb, err := newRedisClient(tc.mode, tc.url)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = typeName(rdb)
			rdb.Close()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("--redis-mode %s --redis-url %s: %s, want %q", tc.mode, tc.url, got, tc.want)
		}
	}
}

// TestRedisClientsSpeakRESP2: every mode's client speaks RESP2, whose
// replies go-redis reads without looking for push notifications, unless
// the URL asks for protocol=3; the shared server sees the version chosen.
func TestRedisClientsSpeakRESP2(t *testing.T) {
	t.Parallel()
	sep := "?"
	if strings.Contains(testenv.RedisURL(), "?") {
		sep = "&"
	}
	for _, tc := range []struct {
		mode, url string
		want      int
	}{
		{"single", testenv.RedisURL(), 2},
		{"single", testenv.RedisURL() + sep + "protocol=3", 3},
		{"sentinel", "redis://s1:26379/0?master_name=m&addr=s2:26379", 2},
		{"sentinel", "redis://s1:26379/0?master_name=m&protocol=3", 3},
		{"cluster", "redis://n1:6379?addr=n2:6379", 2},
		{"cluster", "redis://n1:6379?protocol=3", 3},
	} {
		rdb, err := newRedisClient(tc.mode, tc.url)
		if err != nil {
			t.Fatalf("--redis-mode %s --redis-url %s: %v", tc.mode, tc.url, err)
		}
		if got := protocolOf(rdb); got != tc.want {
			t.Errorf("--redis-mode %s --redis-url %s: protocol %d, want %d", tc.mode, tc.url, got, tc.want)
		}
		if tc.mode == "single" {
			info, err := rdb.Do(t.Context(), "CLIENT", "INFO").Text()
			if err != nil || !slices.Contains(strings.Fields(info), fmt.Sprintf("resp=%d", tc.want)) {
				t.Errorf("--redis-url %s: CLIENT INFO %q (%v), want resp=%d", tc.url, info, err, tc.want)
			}
		}
		rdb.Close()
	}
}

// protocolOf is the RESP version rdb's options name.
func protocolOf(rdb redis.UniversalClient) int {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Protocol
	case *redis.ClusterClient:
		return c.Options().Protocol
	}
	return 0
}

func typeName(rdb redis.UniversalClient) string {
	switch rdb.(type) {
	case *redis.Client:
		return "*redis.Client"
	case *redis.ClusterClient:
		return "*redis.ClusterClient"
	}
	return "?"
}

// TestRedisModeMismatch: a server that answers but is not of the
// deployment --redis-mode names is refused at once (no start-up wait),
// with what to change.
func TestRedisModeMismatch(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedis(t)
	cluster := testenv.StartRedisCluster(t, 3, 0)
	for _, tc := range []struct {
		mode, url, want string
	}{
		{"cluster", "redis://" + server.Addr, "not a Redis Cluster node"},
		{"sentinel", "redis://" + server.Addr + "/0?master_name=m", "not a Sentinel"},
		{"single", "redis://" + cluster.Masters[0] + "/0", "add --redis-mode cluster"},
	} {
		r := tallyWith(t, "status", "--redis-mode", tc.mode, "--redis-url", tc.url)
		if r.code != ExitError || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("status --redis-mode %s --redis-url %s: exit %d, %s; want exit %d saying %q", tc.mode, tc.url, r.code, r.stderr, ExitError, tc.want)
		}
	}
}
