package cli

import "runtime/debug"

// version and revision name the build. make image stamps them
// (-ldflags "-X tally/cli.version=... -X tally/cli.revision=..."); a plain
// go build leaves them empty, and the revision Go records from git
// (vcs.revision) stands in.
var version, revision string

// versionString is what tally --version prints after "tally version ":
// the version and the commit it was built from.
func versionString() string {
	v, rev := version, revision
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && rev == "" {
				rev = s.Value
			}
		}
		if v == "" && info.Main.Version != "" {
			v = info.Main.Version
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if rev == "" {
		return v
	}
	return v + " (revision " + rev + ")"
}
