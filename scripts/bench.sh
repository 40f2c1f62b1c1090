#!/usr/bin/env bash
# bench.sh: tally's benchmarks in one run, next to their baselines (see
# bench/, a module of its own). Prints the table and writes it into
# BENCHMARKS.md.
#
#   scripts/bench.sh           the full run (about 15 minutes on 2 quiet cores)
#   scripts/bench.sh --short   small sizes, under two minutes: a check that
#                              every measurement runs; writes nothing
#
# It uses the PostgreSQL and Redis that scripts/services.sh finds or
# starts, through the URLs it exports; every measurement gets its own
# database and Redis prefix, both removed afterwards. wrk is installed with
# apt-get when missing and running as root; otherwise the intake and burst
# measurements, whose client it is, are skipped. The tuned measurement starts a private
# PostgreSQL of its own from the installed server binaries, which
# scripts/services.sh installs when missing.
# Extra arguments go to the bench program (e.g. -only projector,copy, or
# -only kinds,rebuildranked for the rows of ballots of other kinds).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

short=()
out=(-out BENCHMARKS.md)
args=()
for a in "$@"; do
	case "$a" in
	--short) short=(-short); out=() ;;
	*) args+=("$a") ;;
	esac
done

eval "$(scripts/services.sh env)"
scripts/services.sh postgres-binaries ||
	echo "bench: without the PostgreSQL server binaries the tuned measurement fails" >&2

wrk_bin=""
if command -v wrk >/dev/null; then
	wrk_bin="$(command -v wrk)"
elif [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
	echo "bench: installing wrk with apt-get" >&2
	if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >&2 ||
		{ DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >&2; }; then
		wrk_bin="$(command -v wrk)"
	fi
fi
if [[ -z "$wrk_bin" ]]; then
	echo "bench: wrk is not installed, so the intake and burst measurements are skipped; install it with: sudo apt-get install -y wrk" >&2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
go build -o "$work/tally" .
go -C bench build -o "$work/bare" ./bareserver
go -C bench build -o "$work/sync" ./syncserver
go -C bench build -o "$work/bench" .

echo "bench: load before the run: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$work/bench" -tally "$work/tally" -bare "$work/bare" -sync "$work/sync" -wrk "$wrk_bin" \
	-admin-url "$TALLY_ADMIN_DATABASE_URL" -redis-url "$TALLY_REDIS_URL" -log "$work/children.log" \
	"${short[@]}" "${out[@]}" "${args[@]}" || {
	rc=$?
	echo "bench: failed; the last lines the servers wrote:" >&2
	tail -n 30 "$work/children.log" >&2 || true
	exit "$rc"
}
