package cli

import (
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"tally/intake"
)

// tally intake's live flags reach intake.Config; --max-live-viewers left
// out while --max-conns is given leaves intake its default, half of
// --max-conns, rather than the default of the default --max-conns.
func TestIntakeLiveFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		viewers int
	}{
		{nil, 5000},
		{[]string{"--max-conns", "100"}, 0},
		{[]string{"--max-conns", "100", "--max-live-viewers", "7"}, 7},
	} {
		cmd := intakeCommandRunning(func(_ *ucli.Context, cfg intake.Config, _ map[string]string) error {
			if cfg.MaxLiveViewers != tc.viewers || cfg.LiveHeartbeat != 15*time.Second || cfg.LiveInterval != 200*time.Millisecond {
				t.Errorf("%v: MaxLiveViewers %d (want %d), LiveHeartbeat %s, LiveInterval %s",
					tc.args, cfg.MaxLiveViewers, tc.viewers, cfg.LiveHeartbeat, cfg.LiveInterval)
			}
			return nil
		})
		app := &ucli.App{Flags: cmd.Flags, Action: cmd.Action}
		if err := app.Run(append([]string{"tally"}, tc.args...)); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
	}
}
