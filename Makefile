# tally: make help lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
# Every target that talks to a server first makes sure one is there.
SERVICES := eval "$$(scripts/services.sh env)"
# package:FuzzTarget:executions. make test runs each target for its count of
# executions (about 2s each here, after one build per package: see
# scripts/fuzz.sh): a time budget (-fuzztime 2s) can fail with "context
# deadline exceeded" and no failing input, a race in Go 1.26's fuzz
# coordinator (go.dev/issue/75804). FUZZTIME=5m runs every target that long.
FUZZTIME ?=
FUZZ_TARGETS := ./intake:FuzzParseVote:10000x ./intake/internal/admin:FuzzDecodePollRequest:10000x ./cli:FuzzParseImportLine:10000x ./stream:FuzzDecode:75000x ./vote:FuzzValidID:60000x ./vote:FuzzParseBallot:20000x ./vote:FuzzScanCanonical:20000x ./vote:FuzzScanBallot:20000x ./vote:FuzzValidCanonical:20000x ./audit:FuzzDecodeLeaf:40000x ./audit:FuzzDecodeDefinition:30000x ./audit:FuzzOpenCheckpoint:30000x ./audit:FuzzParseExportLine:20000x ./credential:FuzzVerify:15000x ./credential:FuzzClaimsDecode:15000x ./ledger:FuzzInt8Array:20000x
# staticcheck at a pinned version, fetched through the module proxy by go run:
# lint never depends on what happens to be installed.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# gremlins, pinned the same way, for make mutate.
GREMLINS := github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0
# package:efficacy: make mutate mutates each package (its tests must be fast
# and need no server) and fails when fewer than efficacy percent of the
# mutants its tests cover are killed. MUTATE_PKGS=audit:90 runs one.
MUTATE_PKGS ?= audit:95 vote:95 stream:90
# $(call quietly,WHAT,COMMAND): run COMMAND with its output kept aside; show
# the output only when COMMAND fails, so a passing run stays short.
quietly = out="$$(mktemp)"; if $(2) >"$$out" 2>&1; then rm -f "$$out"; else \
	rc=$$?; cat "$$out"; rm -f "$$out"; echo "$(1) failed (exit $$rc); its output is above" >&2; exit $$rc; fi

.PHONY: help build image run test test-race fuzz mutate bench bench-short chaos lint services services-stop clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

build: ## build the tally binary into ./tally
	$(GO) build -o tally .

image: ## the OCI image (bin/image/oci, reproducible, built without a daemon) and its SBOM (bin/image/tally.cdx.json); IMAGE_DIR=DIR writes them there
	@scripts/image.sh $(IMAGE_DIR)

run: ## set up PostgreSQL and Redis, migrate, and run the demo poll end to end
	@scripts/run.sh

# The chart's test module (deploy/charttest) runs without -race: its code
# has no concurrency of its own, and built with -race its helm and k8s.io
# packages would cost about twice a cold build of tally again, where
# without it they are the ones make lint already built.
# Its go test run also runs every Go benchmark once, in the same -race
# binaries (one build of the tests instead of two); -short makes the
# benchmarks of a million leaves small there, and is read by nothing else.
test: ## vet, every test and every Go benchmark once with -race (tally's and the bench module's; the chart's test without), short fuzz and bench runs (CI runs lint, then this)
	@$(SERVICES); \
	$(GO) vet ./... && $(GO) -C bench vet ./... && \
	$(GO) test -race -count=1 -short -bench . -benchtime 1x -timeout 8m ./... && \
	$(GO) -C bench test -race -count=1 ./... && \
	$(GO) -C deploy/charttest test -count=1 ./... && \
	$(MAKE) --no-print-directory fuzz && \
	{ $(call quietly,scripts/bench.sh --short,scripts/bench.sh --short); }

test-race: test ## the same as test: -race is on for every test but the chart's

fuzz: ## run each fuzz target briefly (FUZZTIME=5m: that long each)
	@$(SERVICES); scripts/fuzz.sh $(if $(FUZZTIME),-t $(FUZZTIME)) $(FUZZ_TARGETS)

# GOFLAGS=-count=1: gremlins times the package's tests once (uncached) and
# gives each mutant's run 10 times that, which also covers compiling the
# mutated package. The floor is checked here, from the report: gremlins
# v0.6.0's --threshold-efficacy never sets its exit status
# (github.com/go-gremlins/gremlins/issues/216).
mutate: ## mutation testing (gremlins, pinned) of audit, vote and stream: each one's efficacy, the mutants that lived; about 10 minutes, not part of test
	@for t in $(MUTATE_PKGS); do \
		IFS=: read -r pkg floor <<< "$$t"; \
		echo "mutate ./$$pkg (efficacy at least $$floor%)"; \
		out="$$(mktemp)"; \
		GOFLAGS=-count=1 $(GO) run $(GREMLINS) unleash --timeout-coefficient 10 --output-statuses lt "./$$pkg" 2>&1 | tee "$$out"; \
		efficacy="$$(sed -n 's/^Test efficacy: \([0-9.]*\)%$$/\1/p' "$$out")"; rm -f "$$out"; \
		if [[ -z "$$efficacy" ]] || awk -v e="$$efficacy" -v f="$$floor" 'BEGIN { exit !(e < f) }'; then \
			echo "mutate: ./$$pkg: efficacy $${efficacy:-not reported}%, below its floor of $$floor%: kill the mutants that lived above with tests" >&2; \
			exit 1; \
		fi; \
	done

bench: ## every throughput, latency and memory figure next to its baseline (about 15 minutes on 2 quiet cores); writes BENCHMARKS.md
	@scripts/bench.sh

bench-short: ## every Go benchmark once (without -race, at full size) and every bench measurement at small sizes; output only on failure
	@$(SERVICES); \
	$(call quietly,go test -bench,$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./...); \
	$(call quietly,scripts/bench.sh --short,scripts/bench.sh --short); \
	echo "benchmarks: ok"

chaos: ## the long fault suite: 80+ kills and crash-restarts under load, then its table
	@$(SERVICES); TALLY_CHAOS=long $(GO) test ./internal/chaos/ -count=1 -run . -timeout 30m -v

lint: ## go mod tidy -diff, gofmt, go vet, staticcheck (tally, the bench module, client/ogentest and the chart's test module), Redocly's OpenAPI lint, the three client generators on it (pinned) and ogen's client against a real intake; reports every check, fails if any did
	@rc=0; \
	for m in . bench client/ogentest deploy/charttest; do \
		$(GO) -C $$m mod tidy -diff || { echo "lint: $$m/go.mod or $$m/go.sum is not tidy (diff above); run: go -C $$m mod tidy" >&2; rc=1; }; \
		$(GO) -C $$m vet ./... || { echo "lint: go vet found the problems above in module $$m" >&2; rc=1; }; \
		$(GO) -C $$m run $(STATICCHECK) ./... || { echo "lint: staticcheck found the problems above in module $$m" >&2; rc=1; }; \
	done; \
	unformatted="$$(gofmt -l .)"; \
	if [[ -n "$$unformatted" ]]; then echo "$$unformatted"; echo "lint: the files above need gofmt -w" >&2; rc=1; fi; \
	scripts/openapi-lint.sh || { echo "lint: Redocly found the problems above in intake/openapi.json (its settings: redocly.yaml)" >&2; rc=1; }; \
	scripts/openapi-generators.sh || { echo "lint: a client generator refused intake/openapi.json, left out an operation or typed a field as any (above)" >&2; rc=1; }; \
	( $(SERVICES) >/dev/null && $(GO) -C client/ogentest test -race -count=1 ./... ) || { echo "lint: ogen's client (client/ogentest) failed against a real intake (above)" >&2; rc=1; }; \
	if ((rc == 0)); then echo "lint: ok"; fi; \
	exit $$rc

services: ## start (or find) PostgreSQL and Redis and print their URLs
	@scripts/services.sh env

services-stop: ## stop the private PostgreSQL and Redis that make started, if any
	@scripts/services.sh stop

clean: ## remove the binary, the image (bin/image/) and the private servers' data (.local/)
	-@scripts/services.sh stop
	rm -rf tally bin/image .local
