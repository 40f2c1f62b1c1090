#!/usr/bin/env bash
# Makes sure tally has a PostgreSQL and a Redis to talk to, and prints the
# environment that points at them, for `eval "$(scripts/services.sh env)"`.
#
#   1. the servers at TALLY_DATABASE_URL / TALLY_REDIS_URL, when reachable;
#   2. otherwise the usual local ones (127.0.0.1:5432 as postgres, 127.0.0.1:6379);
#   3. otherwise private instances started from the installed binaries, on
#      their own ports (55432, 56379), under .local/ (git-ignored); Redis
#      with appendonly yes and appendfsync always.
#
# Servers that answer need nothing installed: without psql or redis-cli the
# check falls back to a TCP connection (a PING for Redis). Only a private
# instance that has to be started needs its server binaries; missing ones are
# installed with apt-get when running as root, otherwise the script prints
# the command to run.
#
# The exported URLs are the ones every other script and test uses:
#   TALLY_DATABASE_URL        the tally database (created by tally migrate)
#   TALLY_ADMIN_DATABASE_URL  the maintenance database "postgres" of the same
#                             server, to create and drop databases from
#                             (scripts/bench.sh)
#   TALLY_REDIS_URL           the Redis intake and projector use
#   TALLY_TEST_DATABASE_URL   the admin URL tests create their databases
#                             from (default: TALLY_ADMIN_DATABASE_URL)
#   TALLY_TEST_REDIS_URL      the Redis tests use (default: TALLY_REDIS_URL)
#
# TALLY_PRIVATE_SERVICES=1 skips 1 and 2 and always uses private instances.
#
#   scripts/services.sh env    start what is needed, print export lines
#   scripts/services.sh stop   stop the private instances this script started
#   scripts/services.sh postgres-binaries
#                              install the PostgreSQL server binaries when
#                              missing (for servers started elsewhere, as
#                              the bench's tuned measurement does)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
local_dir="$root/.local"
pg_dir="$local_dir/postgres"
redis_dir="$local_dir/redis"
pg_port="${TALLY_PRIVATE_PG_PORT:-55432}"
redis_port="${TALLY_PRIVATE_REDIS_PORT:-56379}"
db_name="${TALLY_DB_NAME:-tally}"

say() { echo "services: $*" >&2; }

pg_bin() {
	# The newest installed server binaries; Debian keeps them off PATH.
	local d
	d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)"
	if [[ -n "$d" && -x "$d/$1" ]]; then echo "$d/$1"; return; fi
	command -v "$1" || true
}

# need_packages PACKAGE...: install what is missing with apt-get as root, or
# say which command installs it and stop.
need_packages() {
	(($# == 0)) && return 0
	if [[ "$(id -u)" == 0 ]]; then
		say "installing $* with apt-get"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
	else
		say "missing $*; install them with:"
		say "  sudo apt-get update && sudo apt-get install -y $*"
		exit 1
	fi
}

# ensure_postgres_binaries and ensure_redis_binaries: what starting a private
# instance needs, and only that.
ensure_postgres_binaries() {
	local missing=()
	[[ -n "$(pg_bin initdb)" ]] || missing+=(postgresql)
	command -v psql >/dev/null || missing+=(postgresql-client)
	need_packages "${missing[@]}"
}
ensure_redis_binaries() {
	local missing=()
	command -v redis-server >/dev/null || missing+=(redis-server)
	command -v redis-cli >/dev/null || missing+=(redis-tools)
	need_packages "${missing[@]}"
}

# host_port URL DEFAULT_PORT: "host port" of a postgres:// or redis:// URL
# (user and password dropped; the first host of a list), or of a keyword/value
# PostgreSQL string ("host=... port=..."). Empty when there is no TCP host.
host_port() {
	local url="$1" port="$2" host=""
	if [[ "$url" == *://* ]]; then
		host="${url#*://}"
		host="${host%%[/?]*}"
		host="${host##*@}"
		host="${host%%,*}"
		if [[ "$host" == \[* ]]; then # [ipv6]:port
			[[ "$host" == *\]:* ]] && port="${host##*\]:}"
			host="${host#\[}"
			host="${host%%\]*}"
		elif [[ "$host" == *:* ]]; then
			port="${host##*:}"
			host="${host%%:*}"
		fi
	else
		local kv
		for kv in $url; do
			case "$kv" in
			host=*) host="${kv#host=}" ;;
			port=*) port="${kv#port=}" ;;
			esac
		done
	fi
	[[ -z "$host" || "$host" == /* ]] && return 0
	echo "$host $port"
}

# tcp_open HOST PORT: whether something accepts a connection there, within 2s.
tcp_open() {
	timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

pg_ok() {
	if command -v psql >/dev/null; then
		psql "$1" -Atqc 'SELECT 1' >/dev/null 2>&1
		return
	fi
	# Without psql: a server that accepts the connection is taken as it is.
	local hp
	hp="$(host_port "$1" 5432)"
	[[ -n "$hp" ]] && tcp_open $hp
}

redis_ok() {
	if command -v redis-cli >/dev/null; then
		[[ "$(redis-cli -u "$1" ping 2>/dev/null)" == PONG ]]
		return
	fi
	# Without redis-cli: PING over a plain connection; a server that wants a
	# password first (NOAUTH) answers too.
	local hp
	hp="$(host_port "$1" 6379)"
	[[ -n "$hp" ]] || return 1
	timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf "PING\r\n" >&3 && read -r line <&3 &&
		[[ "$line" == "+PONG"* || "$line" == "-NOAUTH"* ]]' _ $hp 2>/dev/null
}

# with_database URL NAME: URL with its database replaced by NAME; for a
# keyword/value string, NAME as its dbname.
with_database() {
	local url="$1" name="$2" base query=""
	if [[ "$url" != *://* ]]; then echo "$url dbname=$name"; return; fi
	if [[ "$url" == *\?* ]]; then query="?${url#*\?}"; url="${url%%\?*}"; fi
	base="${url%/*}"
	if [[ "$base" == *:/ ]]; then base="$url"; fi
	echo "$base/$name$query"
}

start_private_postgres() {
	ensure_postgres_binaries
	local initdb pg_ctl
	initdb="$(pg_bin initdb)"
	pg_ctl="$(pg_bin pg_ctl)"
	local as=()
	if [[ "$(id -u)" == 0 ]]; then
		# PostgreSQL refuses to run as root.
		id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
		as=(runuser -u postgres --)
	fi
	mkdir -p "$pg_dir"
	[[ "$(id -u)" == 0 ]] && chown postgres "$local_dir" "$pg_dir"
	if [[ ! -f "$pg_dir/data/PG_VERSION" ]]; then
		say "creating a private PostgreSQL cluster in .local/postgres"
		"${as[@]}" "$initdb" -D "$pg_dir/data" -U postgres --auth=trust >"$pg_dir/initdb.log" 2>&1 ||
			{ cat "$pg_dir/initdb.log" >&2; exit 1; }
	fi
	say "starting a private PostgreSQL on 127.0.0.1:$pg_port"
	"${as[@]}" "$pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -t 60 start \
		-o "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1" >&2 ||
		{ tail -n 30 "$pg_dir/server.log" >&2; exit 1; }
}

start_private_redis() {
	ensure_redis_binaries
	mkdir -p "$redis_dir"
	say "starting a private Redis on 127.0.0.1:$redis_port (appendonly yes, appendfsync always)"
	redis-server --daemonize yes --bind 127.0.0.1 --port "$redis_port" --dir "$redis_dir" \
		--appendonly yes --appendfsync always --save "" \
		--pidfile "$redis_dir/redis.pid" --logfile "$redis_dir/redis.log" >&2
	for _ in $(seq 1 100); do
		redis_ok "redis://127.0.0.1:$redis_port/0" && return 0
		sleep 0.1
	done
	say "the private Redis did not answer; see .local/redis/redis.log"
	exit 1
}

cmd_env() {
	local admin_url db_url redis_url
	# PostgreSQL: the admin URL names the maintenance database "postgres".
	local private="${TALLY_PRIVATE_SERVICES:-0}"
	if [[ "$private" != 1 && -n "${TALLY_DATABASE_URL:-}" ]] && pg_ok "$(with_database "$TALLY_DATABASE_URL" postgres)"; then
		admin_url="$(with_database "$TALLY_DATABASE_URL" postgres)"
		db_url="$TALLY_DATABASE_URL"
	else
		[[ -n "${TALLY_DATABASE_URL:-}" ]] && say "TALLY_DATABASE_URL is not reachable; trying others"
		admin_url="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
		if [[ "$private" == 1 ]] || ! pg_ok "$admin_url"; then
			admin_url="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"
			pg_ok "$admin_url" || start_private_postgres
		fi
		db_url="$(with_database "$admin_url" "$db_name")"
	fi
	if [[ "$private" != 1 && -n "${TALLY_REDIS_URL:-}" ]] && redis_ok "$TALLY_REDIS_URL"; then
		redis_url="$TALLY_REDIS_URL"
	else
		[[ -n "${TALLY_REDIS_URL:-}" ]] && say "TALLY_REDIS_URL is not reachable; trying others"
		redis_url="redis://127.0.0.1:6379/0"
		if [[ "$private" == 1 ]] || ! redis_ok "$redis_url"; then
			redis_url="redis://127.0.0.1:$redis_port/0"
			redis_ok "$redis_url" || start_private_redis
		fi
	fi
	say "PostgreSQL: ${db_url%%\?*}   Redis: $redis_url"
	printf 'export TALLY_DATABASE_URL=%q\n' "$db_url"
	printf 'export TALLY_ADMIN_DATABASE_URL=%q\n' "$admin_url"
	printf 'export TALLY_REDIS_URL=%q\n' "$redis_url"
	printf 'export TALLY_TEST_DATABASE_URL=%q\n' "${TALLY_TEST_DATABASE_URL:-$admin_url}"
	printf 'export TALLY_TEST_REDIS_URL=%q\n' "${TALLY_TEST_REDIS_URL:-$redis_url}"
}

cmd_stop() {
	if [[ -f "$pg_dir/data/postmaster.pid" && -n "$(pg_bin pg_ctl)" ]]; then
		local as=()
		[[ "$(id -u)" == 0 ]] && as=(runuser -u postgres --)
		"${as[@]}" "$(pg_bin pg_ctl)" -D "$pg_dir/data" -m fast stop >&2 || true
	fi
	if [[ -f "$redis_dir/redis.pid" ]]; then
		kill "$(cat "$redis_dir/redis.pid")" 2>/dev/null || true
		rm -f "$redis_dir/redis.pid"
	fi
	say "stopped the private instances (if any)"
}

case "${1:-env}" in
env) cmd_env ;;
stop) cmd_stop ;;
postgres-binaries) ensure_postgres_binaries ;;
*) echo "usage: $0 env|stop|postgres-binaries" >&2; exit 2 ;;
esac
