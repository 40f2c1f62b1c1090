#!/usr/bin/env bash
# Prints the path of a promtool (Prometheus' checker of rule files, rule
# unit tests and metrics expositions), for the tests of package deploy and
# for whoever edits deploy/prometheus/:
#
#   "$(scripts/promtool.sh)" test rules deploy/prometheus/alerts_test.yml
#
#   1. $PROMTOOL, when set;
#   2. the promtool on PATH;
#   3. the one this script extracted before, under .local/promtool/;
#   4. otherwise the promtool of Debian's prometheus package: the package is
#      downloaded (apt-get download) and only usr/bin/promtool is extracted
#      from it into .local/promtool/ (git-ignored). Nothing is installed, so
#      no Prometheus server is started. When the package lists are missing
#      and the script runs as root, it runs apt-get update first.
#
# It exits 1, saying what to do, when it cannot get one.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.local/promtool"

say() { echo "promtool.sh: $*" >&2; }

works() { [[ -x "$1" ]] && "$1" --version >/dev/null 2>&1; }

if [[ -n "${PROMTOOL:-}" ]]; then
	works "$PROMTOOL" || { say "PROMTOOL=$PROMTOOL does not run"; exit 1; }
	echo "$PROMTOOL"
	exit 0
fi
if p="$(command -v promtool)" && works "$p"; then
	echo "$p"
	exit 0
fi
if works "$dest/usr/bin/promtool"; then
	echo "$dest/usr/bin/promtool"
	exit 0
fi

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
	say "no promtool on PATH and no apt-get to fetch Debian's; install Prometheus' promtool"
	say "(https://prometheus.io/download/) and put it on PATH, or set PROMTOOL"
	exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# As root, apt-get download fetches as the _apt user into the working
# directory; one that user owns spares a warning.
if [[ "$(id -u)" == 0 ]] && id _apt >/dev/null 2>&1; then
	chown _apt "$work"
fi

download() {
	(cd "$work" && DEBIAN_FRONTEND=noninteractive apt-get download -qq prometheus) >&2
}

if ! download; then
	if [[ "$(id -u)" != 0 ]]; then
		say "apt-get download prometheus failed; refresh the package lists with"
		say "  sudo apt-get update"
		say "and run this again, or set PROMTOOL to a promtool"
		exit 1
	fi
	say "refreshing the package lists (apt-get update)"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
	download || { say "apt-get download prometheus failed (output above)"; exit 1; }
fi

deb=("$work"/prometheus_*.deb)
mkdir -p "$work/x"
dpkg-deb --fsys-tarfile "${deb[0]}" | tar -x -C "$work/x" ./usr/bin/promtool
works "$work/x/usr/bin/promtool" || { say "the promtool extracted from ${deb[0]##*/} does not run"; exit 1; }

# Moved into place whole, so a concurrent run sees either nothing or a
# promtool that works.
mkdir -p "$root/.local"
rm -rf "$dest.new.$$"
mv "$work/x" "$dest.new.$$"
if ! mv -T "$dest.new.$$" "$dest" 2>/dev/null; then
	rm -rf "$dest.new.$$"
fi
works "$dest/usr/bin/promtool" || { say "no promtool at $dest/usr/bin/promtool after extraction"; exit 1; }
say "extracted $("$dest/usr/bin/promtool" --version 2>&1 | head -n1) from ${deb[0]##*/}"
echo "$dest/usr/bin/promtool"
