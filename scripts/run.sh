#!/usr/bin/env bash
# make run: the whole pipeline on this machine as it is.
#
#   services (found or started), migrations, a demo poll and a demo principal,
#   then tally intake and tally projector in the background. It prints the
#   URL, the live results page of the demo poll, the token and a curl line
#   that casts a vote, casts a few demo votes, then a trickle of votes of
#   demo voters (so that the page's bars move), and waits. Ctrl-C stops
#   everything it started and prints the rebuild table.
#
# TALLY_RUN_LISTEN sets intake's address (default 127.0.0.1:8080),
# TALLY_RUN_ADMIN its admin address of /healthz, /readyz and /metrics
# (default 127.0.0.1:8081);
# TALLY_RUN_FOR=30 stops by itself after 30 seconds instead of waiting;
# TALLY_RUN_DEMO_VOTES sets the trickle's votes (default 30, one a second).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/services.sh env)"
listen="${TALLY_RUN_LISTEN:-127.0.0.1:8080}"
admin="${TALLY_RUN_ADMIN:-127.0.0.1:8081}"
metrics="${TALLY_RUN_METRICS:-127.0.0.1:9090}"
logs=".local/run"
mkdir -p "$logs"

echo "== building tally"
go build -o tally .
./tally migrate up >/dev/null
# The credential key: made once, kept with the run's files. It signs the
# principals' tokens (tally principal add) and intake verifies them with
# it, with no database; both read TALLY_CREDENTIAL_KEY.
export TALLY_CREDENTIAL_KEY="$logs/credential.key"
if [[ ! -f "$TALLY_CREDENTIAL_KEY" ]]; then
	./tally credential key generate --out "$TALLY_CREDENTIAL_KEY" >/dev/null 2>&1
fi

# The daemons run as a login granted tally_admin (migration 00012): it is
# tally_daemon, which may add rows but not change or delete them, nor
# switch the triggers off (docs/operations.md, "Running the daemons with
# least privilege"), and may also create and close polls and add and
# revoke principals, so that intake serves the admin routes. The other
# commands here run as the owner. Where that login cannot be made or used
# (a server with password authentication, say), the daemons run as the
# owner, and the run says so.
daemon_url="$(sed -E 's#^(postgres(ql)?://)[^@/]*@#\1tally_run@#' <<<"$TALLY_DATABASE_URL")"
if psql -q "$TALLY_DATABASE_URL" -v ON_ERROR_STOP=1 >/dev/null 2>&1 <<'SQL' &&
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'tally_run') THEN
        CREATE ROLE tally_run LOGIN IN ROLE tally_daemon;
    END IF;
END $$;
GRANT tally_admin TO tally_run;
SQL
	[[ "$daemon_url" == *tally_run@* ]] && psql -q "$daemon_url" -c 'SELECT 1' >/dev/null 2>&1; then
	daemon_as="tally_run (granted tally_admin: appends to the ledger, manages polls and principals, never rewrites)"
else
	daemon_url="$TALLY_DATABASE_URL"
	daemon_as="the database owner (the least-privilege login could not be made or used)"
	export TALLY_ALLOW_SUPERUSER=true # the daemons refuse the owner without it
fi
# The demo poll's results are public: its live page needs no token.
if ! ./tally poll show demo >/dev/null 2>&1; then
	./tally poll create demo --title "Which topic should the next docs sprint cover?" \
		--choice install --choice tutorial --choice reference --choice faq --public-results
elif ! ./tally poll show demo --format json 2>/dev/null | grep -q '"public_results": *true'; then
	# A demo poll made before polls had the setting: make it public, as the
	# owner (there is no command that changes a poll's setting).
	psql -q "$TALLY_DATABASE_URL" -c "UPDATE polls SET public_results = true WHERE id = 'demo'" >/dev/null 2>&1 ||
		echo "run: the demo poll's results are not public, so its live page answers 404; drop the demo database to start afresh" >&2
fi
# Two principals: the demo vote below answers the poll with its own, so
# the token printed for you has not answered it yet (a principal answers
# a poll once).
demo_token="$(./tally principal add "demo-$(date +%s)")"
token="$(./tally principal add "you-$(date +%s)")"
# An admin, for the admin routes (README, "Polls and voters over HTTP").
admin_token="$(./tally principal add --role admin "app-$(date +%s)" 2>/dev/null)"

pids=()
# stop_daemons: SIGTERM to intake and projector, and wait for them.
stop_daemons() {
	trap - INT TERM
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
# fail MESSAGE LOG: stop what was started, show the end of LOG, exit 1.
fail() {
	echo >&2
	echo "run: $1" >&2
	stop_daemons
	if [[ -s "$2" ]]; then
		echo "run: the last lines of $2:" >&2
		tail -n 40 "$2" >&2
	fi
	echo "run: failed; the logs are in $logs/" >&2
	exit 1
}
# stop: the normal end (Ctrl-C or TALLY_RUN_FOR): stop, then show the
# tallies and the rebuild table; the exit status is rebuild's.
stop() {
	echo
	echo "== stopping intake and projector"
	stop_daemons
	echo
	echo "== tally poll show demo"
	./tally poll show demo || true
	echo
	echo "== tally rebuild (every tally recomputed from the ledger and diffed against the projection)"
	./tally rebuild
	exit $?
}
trap stop INT TERM

TALLY_DATABASE_URL="$daemon_url" ./tally intake --listen "$listen" --admin-listen "$admin" --log-format json >"$logs/intake.log" 2>&1 &
pids+=($!)
# The log's signer key: made once, kept with the run's files. The
# projector signs each poll's log with it, so votes get receipts.
log_key="$logs/log.key"
if [[ ! -f "$log_key" ]]; then
	# Its verifier key goes to log.vkey; the banner below prints it.
	./tally log key generate --name "tally.local" --out "$log_key" >"$logs/log.vkey" 2>/dev/null
fi
TALLY_DATABASE_URL="$daemon_url" ./tally projector --batch-wait 20ms --metrics-listen "$metrics" --log-key "$log_key" --log-format json >"$logs/projector.log" 2>&1 &
pids+=($!)

# intake answers /readyz once Redis and PostgreSQL answer it; 30s covers a
# cold start on a loaded machine.
ready_by=$((SECONDS + 30))
until curl -fs "http://$admin/readyz" >/dev/null 2>&1; do
	kill -0 "${pids[0]}" 2>/dev/null || fail "intake exited before it was ready" "$logs/intake.log"
	((SECONDS < ready_by)) || fail "intake did not become ready at http://$admin/readyz within 30s" "$logs/intake.log"
	sleep 0.1
done

vote() { # vote EVENT_ID CANDIDATE, as the demo principal
	curl -s -X POST "http://$listen/v1/votes" -H "Authorization: Bearer $demo_token" \
		-H 'Content-Type: application/json' \
		-d "{\"event_id\":\"$1\",\"poll_id\":\"demo\",\"candidate_id\":\"$2\"}"
}

# trickle: TALLY_RUN_DEMO_VOTES votes on the demo poll, one a second, each
# of a demo voter of its own (a principal answers a poll once), quietly, so
# that the bars of the live page move.
trickle() {
	local choices=(tutorial install tutorial reference faq tutorial reference install) i token
	for ((i = 1; i <= ${TALLY_RUN_DEMO_VOTES:-30}; i++)); do
		token="$(./tally principal add "demo-voter-$(date +%s%N)" 2>/dev/null)" || return 0
		curl -s -o /dev/null -X POST "http://$listen/v1/votes" -H "Authorization: Bearer $token" \
			-H 'Content-Type: application/json' \
			-d "{\"event_id\":\"trickle-$i\",\"poll_id\":\"demo\",\"candidate_id\":\"${choices[RANDOM % ${#choices[@]}]}\"}" || true
		sleep 1
	done
}

cat <<EOF

tally is running.
  intake     http://$listen      (log: $logs/intake.log; probes and metrics on http://$admin)
  live page  http://$listen/polls/demo  (the demo poll's results, live; open it in a browser)
  projector  metrics on http://$metrics/metrics  (log: $logs/projector.log)
  log key    verifier key $(cat "$logs/log.vkey")  (in $logs/log.vkey; the signer key, $log_key, stays secret)
  token      $token
  admin      $admin_token  (an admin's token: POST /v1/polls, /v1/principals; README "Polls and voters over HTTP")
  daemons connect to PostgreSQL as $daemon_as

Cast a vote (each principal answers a poll once; use a new event_id for each try):
  curl -s -X POST http://$listen/v1/votes -H 'Authorization: Bearer $token' -H 'Content-Type: application/json' -d '{"event_id":"my-first-vote","poll_id":"demo","candidate_id":"tutorial"}'
Its status, and the tallies:
  curl -s -H 'Authorization: Bearer $token' http://$listen/v1/votes/my-first-vote
  curl -s -H 'Authorization: Bearer $token' http://$listen/v1/polls/demo/results
A second after it is recorded, its receipt, checked offline against the log's verifier key (docs/audit.md):
  curl -s -H 'Authorization: Bearer $token' http://$listen/v1/votes/my-first-vote | ./tally audit receipt - --key "\$(cat $logs/log.vkey)"

EOF

echo "== a demo vote, its exact retry, and the same key with another choice"
demo_key="demo-$(date +%s%N)"
vote "$demo_key" reference
vote "$demo_key" reference
vote "$demo_key" faq
sleep 0.5
echo "== its status"
curl -s -H "Authorization: Bearer $demo_token" "http://$listen/v1/votes/$demo_key"
echo
echo
echo "== demo voters: ${TALLY_RUN_DEMO_VOTES:-30} votes, one a second; watch the bars move on http://$listen/polls/demo"
trickle &
pids+=($!)
echo "Press Ctrl-C to stop intake and projector and print the rebuild table."
if [[ -n "${TALLY_RUN_FOR:-}" ]]; then
	sleep "$TALLY_RUN_FOR"
	stop
fi
while true; do
	kill -0 "${pids[0]}" 2>/dev/null || fail "intake exited" "$logs/intake.log"
	kill -0 "${pids[1]}" 2>/dev/null || fail "the projector exited" "$logs/projector.log"
	sleep 1
done
