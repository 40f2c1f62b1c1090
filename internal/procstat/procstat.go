// Package procstat reads what Linux's /proc says of a process: the CPU time
// it has used. The benchmarks use it to give CPU per event of each process
// involved, including the PostgreSQL backends of a local server.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CPUSeconds is the user and system CPU time pid has used, in seconds; 0
// when it cannot be read (no such process, or no /proc).
func CPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}
