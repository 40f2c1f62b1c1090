#!/usr/bin/env bash
# Prints the path of a Chromium (or Chrome) binary for the browser tests
# (intake/page_browser_test.go), installing Debian's chromium package when
# none is found and the script runs as root.
#
#   1. TALLY_CHROMIUM, when it names an executable;
#   2. chromium, chromium-browser, google-chrome or google-chrome-stable on PATH;
#   3. as root: apt-get update && apt-get install -y chromium, then 2 again.
#
# Exits 1 with the command to run when it finds none, so that the test can
# say what to install.
set -euo pipefail

say() { echo "chromium: $*" >&2; }

find_browser() {
	if [[ -n "${TALLY_CHROMIUM:-}" && -x "${TALLY_CHROMIUM}" ]]; then
		echo "$TALLY_CHROMIUM"
		return 0
	fi
	local name
	for name in chromium chromium-browser google-chrome google-chrome-stable; do
		if command -v "$name" >/dev/null 2>&1; then
			command -v "$name"
			return 0
		fi
	done
	return 1
}

if find_browser; then
	exit 0
fi
if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
	say "no Chromium found; installing Debian's chromium package with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	if apt-get update -qq >&2 && apt-get install -y -qq chromium >&2 && find_browser; then
		exit 0
	fi
	say "apt-get could not install chromium"
fi
say "no Chromium or Chrome found: install one, e.g."
say "  sudo apt-get update && sudo apt-get install -y chromium"
say "or set TALLY_CHROMIUM to the browser's path"
exit 1
