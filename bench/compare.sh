#!/usr/bin/env bash
# compare.sh: POST /v1/votes under wrk on loopback, against a real tally
# intake and, in the same run, against a bare net/http handler that only
# answers 202 (bench/bareserver). Prints wrk's figures for each,
# ROUNDS times, alternating (every other round in reverse order), with the CPU each server spent per request
# (from /proc) and, for intakes, Redis' CPU per EVALSHA (from the deltas of
# INFO commandstats; never reset, the Redis may be shared: another client's
# EVALSHAs in the same seconds would count too).
#
#   TALLY_DATABASE_URL=postgres://postgres@127.0.0.1:5432/tally_bench_intake?sslmode=disable \
#     bench/compare.sh
#
# BASE=REV adds a third target, the intake of git revision REV (built from
# git archive), so a change can be measured against it in the same rounds.
# BASE_REDIS_URL / TALLY_REDIS_URL may differ (e.g. ?protocol=2) to compare
# client settings. ROUNDS, DURATION, THREADS, CONNECTIONS as named below.
#
# The database must exist; it is migrated, and a poll and a principal are
# added to it. The Redis keys written under the run's own prefix are
# deleted at the end. Needs wrk, redis-cli and the go tool; run it from the
# repository root.
set -euo pipefail

: "${TALLY_DATABASE_URL:?set TALLY_DATABASE_URL to an existing database}"
REDIS_URL=${TALLY_REDIS_URL:-redis://127.0.0.1:6379/0}
BASE_REDIS_URL=${BASE_REDIS_URL:-$REDIS_URL}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
INTAKE_ADDR=${INTAKE_ADDR:-127.0.0.1:18090}
BARE_ADDR=${BARE_ADDR:-127.0.0.1:18091}
BASE_ADDR=${BASE_ADDR:-127.0.0.1:18092}
BASE=${BASE:-}

work=$(mktemp -d)
pids=()
run=b$(date +%s)
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for prefix in "$run" "${run}base"; do
		redis-cli -u "$REDIS_URL" --scan --pattern "{$prefix:*" | xargs -r -n 1000 redis-cli -u "$REDIS_URL" unlink >/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/tally" .
go -C bench build -o "$work/bare" ./bareserver
targets=(intake bare)
if [[ -n $BASE ]]; then
	mkdir "$work/base"
	git archive "$BASE" | tar -x -C "$work/base"
	(cd "$work/base" && go build -o "$work/tally-base" .)
	targets=(base intake bare)
fi
export TALLY_DATABASE_URL TALLY_REDIS_URL=$REDIS_URL
"$work/tally" migrate up >/dev/null 2>&1
"$work/tally" poll create --title "intake benchmark" --choice a --choice b "$run" >/dev/null 2>&1
token=$("$work/tally" principal add "bench $run" 2>/dev/null)

declare -A pid_of addr_of
intake_flags=(--log-level error --rate 1000000 --burst 1000000 --max-backlog 100000000 --idempotency-window 2m)
"$work/tally" intake --listen "$INTAKE_ADDR" --stream-prefix "$run" "${intake_flags[@]}" &
pids+=($!)
pid_of[intake]=$!
addr_of[intake]=$INTAKE_ADDR
"$work/bare" -listen "$BARE_ADDR" &
pids+=($!)
pid_of[bare]=$!
addr_of[bare]=$BARE_ADDR
if [[ -n $BASE ]]; then
	TALLY_REDIS_URL=$BASE_REDIS_URL "$work/tally-base" intake --listen "$BASE_ADDR" --stream-prefix "${run}base" "${intake_flags[@]}" &
	pids+=($!)
	pid_of[base]=$!
	addr_of[base]=$BASE_ADDR
fi
for t in "${targets[@]}"; do
	for _ in $(seq 50); do curl -s -o /dev/null "http://${addr_of[$t]}/healthz" && break; sleep 0.1; done
done

# cpu_ticks PID: user + system clock ticks of a process so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# evalsha: "calls usec" of EVALSHA in Redis so far.
evalsha() {
	redis-cli -u "$REDIS_URL" info commandstats | tr -d '\r' |
		awk -F'[:=,]' '/^cmdstat_evalsha:/ {print $3, $5; found=1} END {if (!found) print 0, 0}'
}
hz=$(getconf CLK_TCK)

for round in $(seq "$ROUNDS"); do
	order=("${targets[@]}")
	if ((round % 2 == 0)); then # every other round backwards: no target always goes first
		order=()
		for ((i = ${#targets[@]} - 1; i >= 0; i--)); do order+=("${targets[i]}"); done
	fi
	for target in "${order[@]}"; do
		addr=${addr_of[$target]}
		echo "== round $round: $target ($addr), load $(cut -d' ' -f1-3 /proc/loadavg)"
		t0=$(cpu_ticks "${pid_of[$target]}")
		read -r c0 u0 < <(evalsha)
		out=$(TALLY_TOKEN=$token TALLY_POLL=$run TALLY_RUN="$run-$round-$target" \
			timeout 120 wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency \
			-s bench/testdata/post_vote.lua "http://$addr")
		t1=$(cpu_ticks "${pid_of[$target]}")
		read -r c1 u1 < <(evalsha)
		grep -E 'Requests/sec|^ +(50|99)%|answers other|Socket errors' <<<"$out"
		n=$(awk '/requests in/ {print $1}' <<<"$out")
		awk -v n="$n" -v t="$((t1 - t0))" -v hz="$hz" -v c="$((c1 - c0))" -v u="$((u1 - u0))" -v tg="$target" 'BEGIN {
			printf "  CPU per request: %s %.1f us", tg, t / hz * 1e6 / n
			if (tg != "bare" && c > 0) printf ", Redis %.1f us per EVALSHA (%d calls)", u / c, c
			printf "\n"
		}'
	done
done
