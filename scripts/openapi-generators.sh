#!/usr/bin/env bash
# openapi-generators.sh: generate a client from intake/openapi.json with
# each of three generators, pinned, and fail when one of them refuses the
# document, leaves out an operation, or types a field as interface{}, any
# or unknown where the document gives it a type:
#
#   oapi-codegen (Go)         every operation a method of its client
#   ogen (Go)                 every operation a method of its client; ogen
#                             fails outright on what it cannot generate
#   openapi-typescript        every operation in its operations interface
#
# make lint runs it. The only untyped values allowed are the ones the
# document leaves untyped: a free-form object's values (a Go map of any,
# ogen's struct{}), a response header index signature, and a media type
# given without a schema (the HTML page, the event stream). Node.js and npm
# are installed with apt-get when missing and running as root, as
# openapi-lint.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
# An argument names another document to check (to see the checks fail).
doc="$(realpath "${1:-intake/openapi.json}")"
oapi="github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"
ogen="github.com/ogen-go/ogen/cmd/ogen@v1.25.0"
ts="openapi-typescript@7.13.0"

say() { echo "openapi-generators: $*" >&2; }

if ! command -v npx >/dev/null; then
	if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
		say "installing nodejs and npm with apt-get"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >&2
	else
		say "npx is not installed: install Node.js and npm (sudo apt-get install -y nodejs npm)"
		exit 1
	fi
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/oapi" "$out/ogen"

ops=()
while IFS= read -r op; do ops+=("$op"); done < <(grep -o '"operationId": *"[^"]*"' "$doc" | sed 's/.*"\([^"]*\)"$/\1/')
if ((${#ops[@]} == 0)); then
	say "found no operationId in $doc"
	exit 1
fi

rc=0
fail() { say "$*"; rc=1; }

# run NAME COMMAND...: run a generator, showing its output only when it fails.
run() {
	local name="$1"
	shift
	if ! "$@" >"$out/$name.log" 2>&1; then
		cat "$out/$name.log" >&2
		fail "$name failed on intake/openapi.json (its output is above)"
		return 1
	fi
}

# untyped FILE PATTERN: print the lines of FILE where a field or a type is
# PATTERN, the generator's word for a value of no type.
untyped() { grep -nE "$2" "$1" || true; }

# oapi-codegen: a client method per operation; interface{} only as a
# free-form object's map value.
cat >"$out/oapi.yaml" <<EOF
package: oapiclient
generate: {client: true, models: true}
output: $out/oapi/client.gen.go
EOF
if run oapi-codegen go run "$oapi" -config "$out/oapi.yaml" "$doc"; then
	f="$out/oapi/client.gen.go"
	for op in "${ops[@]}"; do
		grep -q "^func (c \*Client) ${op^}(" "$f" || fail "oapi-codegen: no client method for operation $op"
	done
	bad="$(untyped "$f" '^(type [A-Za-z0-9_]+ =? ?|	[A-Za-z0-9_]+ +)[][*]*(interface\{\}|any)( |$)')"
	[[ -z "$bad" ]] || fail "oapi-codegen typed these as interface{}:"$'\n'"$bad"
fi

# client/api.gen.go is what oapi-codegen makes of the document with
# client/oapi-codegen.yaml: go generate ./client wrote it last.
# (Its output, api.gen.go, is relative to the directory it runs in.)
mkdir -p "$out/client"
if run oapi-codegen-client bash -c 'cd "$1" && go run "$2" -config "$3" "$4"' _ "$out/client" "$oapi" "$PWD/client/oapi-codegen.yaml" "$doc"; then
	cmp -s "$out/client/api.gen.go" client/api.gen.go ||
		fail "client/api.gen.go is not what oapi-codegen generates from the document: run go generate ./client"
fi

# client/ogentest/ogenclient is what ogen makes of the document with
# client/ogentest/ogen.yml: go generate in client/ogentest wrote it last.
if run ogen-ogentest go run "$ogen" --config client/ogentest/ogen.yml --target "$out/ogenclient" --package ogenclient --clean "$doc"; then
	diff -r -q "$out/ogenclient" client/ogentest/ogenclient >&2 ||
		fail "client/ogentest/ogenclient is not what ogen generates from the document: run go generate in client/ogentest"
fi

# ogen: no ogen.yml, so an operation it cannot generate fails the run.
if run ogen go run "$ogen" --target "$out/ogen" --package ogenclient --clean "$doc"; then
	f="$out/ogen/oas_client_gen.go"
	for op in "${ops[@]}"; do
		grep -q "^func (c \*Client) ${op^}(" "$f" || fail "ogen: no client method for operation $op"
	done
	bad="$(untyped "$out/ogen/oas_schemas_gen.go" '^(type [A-Za-z0-9_]+ =? ?|	[A-Za-z0-9_]+ +)[][*]*(interface\{\}|any|jx\.Raw)( |$)')"
	[[ -z "$bad" ]] || fail "ogen typed these as any:"$'\n'"$bad"
	grep -q "Type is not defined, using any" "$out/ogen.log" &&
		fail "ogen found schemas with no type:"$'\n'"$(grep "Type is not defined" "$out/ogen.log")"
fi

# openapi-typescript: each operation in the operations interface; unknown
# or any only for a header index signature or a media type with no schema.
if run openapi-typescript npx --yes "$ts" "$doc" -o "$out/api.d.ts"; then
	f="$out/api.d.ts"
	sed -n '/^export interface operations {/,$p' "$f" >"$out/operations.d.ts"
	for op in "${ops[@]}"; do
		grep -q "^    $op: {" "$out/operations.d.ts" ||
			fail "openapi-typescript: no operation $op in its operations interface"
	done
	bad="$(grep -nE '^ *("[^"]*"|[A-Za-z0-9_]+)\??: (unknown|any)(\[\])?;' "$f" |
		grep -vE '\[name: string\]: unknown;|"[a-z]+/[^"]*": unknown;' || true)"
	[[ -z "$bad" ]] || fail "openapi-typescript typed these as unknown or any:"$'\n'"$bad"
fi

if ((rc == 0)); then
	echo "openapi-generators: oapi-codegen, ogen and openapi-typescript each generate all ${#ops[@]} operations of intake/openapi.json, every field typed"
fi
exit $rc
