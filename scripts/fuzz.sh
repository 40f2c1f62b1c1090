#!/usr/bin/env bash
# fuzz.sh: run fuzz targets, each for a number of executions or a time.
#
#   scripts/fuzz.sh [-t BUDGET] PKG:TARGET:EXECUTIONS...
#
# BUDGET (e.g. 5m), when given, replaces every target's own count.
#
# Each package's fuzz-instrumented test binary is built once (go test -c
# -fuzz) and every target of that package runs from it, in the package's
# directory with go test's own corpus cache: what go test -fuzz does, less
# one build and link per target. A failing input is written to the
# package's testdata/fuzz/TARGET, as go test -fuzz writes it.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

budget=""
if [[ "${1:-}" == "-t" ]]; then
	budget="$2"
	shift 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cache="$(go env GOCACHE)/fuzz"

declare -A built=()
for t in "$@"; do
	IFS=: read -r pkg target count <<<"$t"
	bin="$work/$(tr / _ <<<"${pkg#./}").test"
	if [[ -z "${built[$pkg]:-}" ]]; then
		go test -c -fuzz . -o "$bin" "$pkg"
		built[$pkg]=1
	fi
	import="$(go list "$pkg")"
	echo "fuzz $target ($pkg) for ${budget:-$count}"
	(cd "$pkg" && "$bin" -test.run '^$' -test.fuzz "^$target\$" -test.fuzztime "${budget:-$count}" \
		-test.fuzzcachedir "$cache/$import" -test.paniconexit0) || {
		echo "fuzz: $target ($pkg) failed; the failing input is under ${pkg#./}/testdata/fuzz/$target; run it again with: go test -run '^$target\$' $pkg" >&2
		exit 1
	}
done
