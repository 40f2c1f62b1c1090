#!/usr/bin/env bash
# Prints the path of a command the tests of package deploy need, installing
# the Debian package that has it when it is missing:
#
#   scripts/tool.sh systemd-analyze systemd
#   scripts/tool.sh umoci umoci
#
# As root, a missing package is installed with apt-get (after apt-get
# update); otherwise the script says which command installs it and exits 1,
# as scripts/services.sh does for the servers.
set -euo pipefail

if (($# != 2)); then
	echo "usage: $0 COMMAND DEBIAN_PACKAGE" >&2
	exit 2
fi
cmd="$1" pkg="$2"

say() { echo "tool.sh: $*" >&2; }

if p="$(command -v "$cmd")"; then
	echo "$p"
	exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
	say "$cmd is missing; install it with:"
	say "  sudo apt-get update && sudo apt-get install -y $pkg"
	exit 1
fi
say "installing $pkg with apt-get (for $cmd)"
# One apt-get at a time: tests of several packages may ask at once.
exec 9>/var/lib/apt/tally-tool.lock
flock 9
if ! command -v "$cmd" >/dev/null; then
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >&2
fi
command -v "$cmd" || { say "apt-get installed $pkg, and still no $cmd on PATH"; exit 1; }
