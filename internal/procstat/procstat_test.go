package procstat

import (
	"os"
	"testing"
	"time"
)

func TestCPUSecondsGrowsWithWork(t *testing.T) {
	pid := os.Getpid()
	before := CPUSeconds(pid)
	deadline := time.Now().Add(300 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	after := CPUSeconds(pid)
	if after <= before {
		t.Fatalf("CPU time %v after 300ms of work, %v before: want more (%d spins)", after, before, x)
	}
	if got := CPUSeconds(-1); got != 0 {
		t.Fatalf("CPUSeconds of no process = %v, want 0", got)
	}
}
