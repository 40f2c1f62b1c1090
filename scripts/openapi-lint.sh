#!/usr/bin/env bash
# openapi-lint.sh: Redocly's linter (a pinned @redocly/cli, through npx)
# on intake/openapi.json, with the settings of redocly.yaml: its
# recommended rules. It fails on an error, and on a warning too (Redocly
# itself exits 0 on warnings): each one is fixed in the document or
# answered in redocly.yaml. Node.js and npm are installed with apt-get when
# missing and running as root.
set -euo pipefail
cd "$(dirname "$0")/.."
redocly="@redocly/cli@2.77.0"

if ! command -v npx >/dev/null; then
	if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
		echo "openapi-lint: installing nodejs and npm with apt-get" >&2
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >&2
	else
		echo "openapi-lint: npx is not installed: install Node.js and npm (sudo apt-get install -y nodejs npm)" >&2
		exit 1
	fi
fi
out="$(npx --yes "$redocly" lint intake/openapi.json 2>&1)" || { echo "$out"; exit 1; }
if grep -Eq 'You have [0-9]+ warnings?' <<<"$out"; then
	echo "$out"
	echo "openapi-lint: warnings above: fix them in intake/openapi.json, or answer them in redocly.yaml" >&2
	exit 1
fi
echo "openapi-lint: intake/openapi.json passes Redocly's recommended rules ($redocly)"
