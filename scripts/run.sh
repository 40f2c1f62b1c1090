#!/usr/bin/env bash
# make run: set up PostgreSQL and Redis, migrate, create a demo poll and
# principal, import a few demo events through the ledger's batch path, and
# print the rebuild table.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/services.sh env)"
go build -o tally .
./tally migrate up >/dev/null
if ! ./tally poll show demo >/dev/null 2>&1; then
	./tally poll create demo --title "Which topic should the next docs sprint cover?" \
		--choice install --choice tutorial --choice reference --choice faq
fi
token="$(./tally principal add demo-voter 2>/dev/null)"
echo "demo principal token: $token (stored only as its SHA-256)"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
i=0
for choice in tutorial reference tutorial faq tutorial install reference tutorial; do
	i=$((i + 1))
	echo "{\"event_id\":\"demo-$i\",\"poll_id\":\"demo\",\"candidate_id\":\"$choice\",\"principal_id\":\"demo-user-$i\"}"
done >"$tmp"
echo '{"event_id":"demo-1","poll_id":"demo","candidate_id":"tutorial","principal_id":"demo-user-1"}' >>"$tmp" # an exact retry
echo '{"event_id":"demo-x","poll_id":"demo","candidate_id":"faq","principal_id":"demo-user-2"}' >>"$tmp"   # a second response
echo
echo "== tally import (each event through the ledger's batch path)"
./tally import "$tmp"
echo
echo "== tally poll show demo"
./tally poll show demo
echo
echo "== tally rebuild (the tallies recomputed from the ledger, diffed against the projection)"
./tally rebuild
