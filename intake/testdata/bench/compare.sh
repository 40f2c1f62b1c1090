#!/usr/bin/env bash
# compare.sh: POST /v1/votes under wrk on loopback, against a real tally
# intake and, in the same run, against a bare net/http handler that only
# answers 202 (intake/internal/bareserver). Prints wrk's figures for each,
# ROUNDS times, alternating.
#
#   TALLY_DATABASE_URL=postgres://postgres@127.0.0.1:5432/tally_bench_intake?sslmode=disable \
#     intake/testdata/bench/compare.sh
#
# The database must exist; it is migrated, and a poll and a principal are
# added to it. The Redis keys written under the run's own prefix are
# deleted at the end. Needs wrk, redis-cli and the go tool; run it from the
# module root.
set -euo pipefail

: "${TALLY_DATABASE_URL:?set TALLY_DATABASE_URL to an existing database}"
REDIS_URL=${TALLY_REDIS_URL:-redis://127.0.0.1:6379/0}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
INTAKE_ADDR=${INTAKE_ADDR:-127.0.0.1:18090}
BARE_ADDR=${BARE_ADDR:-127.0.0.1:18091}

work=$(mktemp -d)
pids=()
run=b$(date +%s)
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	redis-cli -u "$REDIS_URL" --scan --pattern "{$run:*" | xargs -r -n 1000 redis-cli -u "$REDIS_URL" unlink >/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/tally" .
go build -o "$work/bare" ./intake/internal/bareserver
export TALLY_DATABASE_URL TALLY_REDIS_URL=$REDIS_URL
"$work/tally" migrate up >/dev/null 2>&1
"$work/tally" poll create --title "intake benchmark" --choice a --choice b "$run" >/dev/null 2>&1
token=$("$work/tally" principal add "bench $run" 2>/dev/null)

"$work/tally" intake --listen "$INTAKE_ADDR" --stream-prefix "$run" --log-level error \
	--rate 1000000 --burst 1000000 --max-backlog 100000000 --idempotency-window 2m &
pids+=($!)
"$work/bare" -listen "$BARE_ADDR" &
pids+=($!)
for addr in "$INTAKE_ADDR" "$BARE_ADDR"; do
	for _ in $(seq 50); do curl -s -o /dev/null "http://$addr/healthz" && break; sleep 0.1; done
done

for round in $(seq "$ROUNDS"); do
	for target in intake bare; do
		addr=$INTAKE_ADDR
		[[ $target == bare ]] && addr=$BARE_ADDR
		echo "== round $round: $target ($addr), load $(cut -d' ' -f1 /proc/loadavg)"
		TALLY_TOKEN=$token TALLY_POLL=$run TALLY_RUN="$run-$round-$target" \
			timeout 120 wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency \
			-s intake/testdata/bench/post_vote.lua "http://$addr" |
			grep -E 'Requests/sec|^ +(50|99)%|answers other|Socket errors'
	done
done
