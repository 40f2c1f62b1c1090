package cli

import (
	"strings"
	"testing"
)

// tally loadtest refuses bad flags before it connects anywhere: the
// database here does not answer, so only the flag check can speak.
func TestLoadtestFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "http://127.0.0.1:1", "--votes", "0"}, "--votes 0: give a positive number of votes"},
		{[]string{"--target", "http://127.0.0.1:1", "--duration", "-1s"}, "--duration -1s: give a positive duration"},
		{[]string{"--votes", "10"}, "give the intake URL to send to"},
		{[]string{"--target", "http://127.0.0.1:1", "--votes", "10", "--format", "yaml"}, `--format "yaml": use table or json`},
	} {
		r := tallyWith(t, append([]string{"loadtest", "--database-url", "postgres://postgres@127.0.0.1:1/none",
			"--redis-url", "redis://127.0.0.1:1/0"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "cannot reach") {
			t.Errorf("loadtest %v: %+v, want exit 2 with %q", tc.args, r, tc.want)
		}
	}
}
