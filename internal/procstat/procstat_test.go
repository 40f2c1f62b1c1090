package procstat

import (
	"os"
	"testing"
	"time"

	"tally/internal/testenv"
)

// TestCPUSecondsGrowsWithWork: the test's own CPU time grows while it
// works. It works until it does, in slices of 20ms, rather than for a
// fixed time: on a loaded machine 300ms of wall time may hold less than a
// clock tick of CPU.
func TestCPUSecondsGrowsWithWork(t *testing.T) {
	pid := os.Getpid()
	before := CPUSeconds(pid)
	spins := 0
	testenv.Eventually(t, 10*time.Second, "the CPU time to grow with work", func() bool {
		for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
			spins++
		}
		return CPUSeconds(pid) > before
	})
	t.Logf("%d spins", spins)
	if got := CPUSeconds(-1); got != 0 {
		t.Fatalf("CPUSeconds of no process = %v, want 0", got)
	}
}
