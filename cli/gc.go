package cli

import (
	"os"
	"runtime/debug"
)

// daemonGCPercent is the garbage collector's target of tally intake and
// tally projector. Both keep a few MB live and allocate a few KB per vote,
// so at the runtime's default of 100 they collect many times a second under
// load and the projector spends about a third of its CPU collecting; at 400
// their peak RSS stays well under 100 MB (BENCHMARKS.md has the figures).
const daemonGCPercent = 400

// setDaemonGC sets the garbage collector's target for a daemon, unless the
// operator set GOGC: the operator's setting wins. It is process-wide, so
// only the commands that run a daemon call it.
func setDaemonGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(daemonGCPercent)
	}
}
