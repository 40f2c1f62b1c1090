package cli

import (
	"strings"
	"testing"
)

func TestRedisVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		info    string
		version string
		major   int
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:0\r\n", "7.0.15", 7},
		{"# Server\r\nredis_version:6.2.14\r\n", "6.2.14", 6},
		{"# Server\r\nos:Linux\r\n", "", 0},
		{"redis_version:x.y\r\n", "x.y", 0},
	} {
		if v, m := redisVersion(tc.info); v != tc.version || m != tc.major {
			t.Errorf("redisVersion(%q) = %q, %d; want %q, %d", tc.info, v, m, tc.version, tc.major)
		}
	}
}

// tally intake --pprof without --admin-listen is refused before anything
// connects, naming the flag.
func TestIntakePprofNeedsAdminListen(t *testing.T) {
	t.Parallel()
	r := tallyWith(t, "intake", "--pprof", "--database-url", "postgres://postgres@127.0.0.1:1/none", "--startup-wait", "0s")
	if r.code != ExitError || !strings.Contains(r.stderr, "--pprof: the profiles are served on the admin listener only") {
		t.Errorf("intake --pprof without --admin-listen: %+v, want a refusal naming --pprof", r)
	}
}
