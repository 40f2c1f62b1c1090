# tally: make help lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
# Every target that talks to a server first makes sure one is there.
SERVICES := eval "$$(scripts/services.sh env)"
FUZZTIME ?= 10s
# package:FuzzTarget, each run for FUZZTIME by make test.
FUZZ_TARGETS := ./intake:FuzzParseVote ./cli:FuzzParseImportLine ./stream:FuzzDecode

.PHONY: help build run test test-race fuzz bench bench-short chaos lint services services-stop clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

build: ## build the tally binary into ./tally
	$(GO) build -o tally .

run: ## set up PostgreSQL and Redis, migrate, and run the demo poll end to end
	@scripts/run.sh

test: ## what CI runs: vet, every test with -race, short fuzz and benchmark runs
	@$(SERVICES); \
	$(GO) vet ./... && \
	$(GO) test -race -count=1 -timeout 8m ./... && \
	$(MAKE) --no-print-directory fuzz && \
	$(MAKE) --no-print-directory bench-short

test-race: test ## the same as test: -race is always on

fuzz: ## run each fuzz target for FUZZTIME (default 10s)
	@$(SERVICES); for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} ($${t%%:*}) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}" || exit 1; \
	done

bench: ## every throughput, latency and memory figure next to its baseline (about 3-4 minutes); writes BENCHMARKS.md
	@scripts/bench.sh

bench-short: ## every Go benchmark once, and every bench measurement at small sizes (under a minute)
	@$(SERVICES); $(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./... >/dev/null && \
	scripts/bench.sh --short >/dev/null && echo "benchmarks: ok"

chaos: ## the long fault suite: 80+ kills and crash-restarts under load, then its table
	@$(SERVICES); TALLY_CHAOS=long $(GO) test ./internal/chaos/ -count=1 -run . -timeout 30m -v

lint: ## gofmt, go vet, and staticcheck when installed
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: the files above need formatting" >&2; exit 1; }
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null; then staticcheck ./...; else echo "staticcheck not installed; skipped"; fi

services: ## start (or find) PostgreSQL and Redis and print their URLs
	@scripts/services.sh env

services-stop: ## stop the private PostgreSQL and Redis that make started, if any
	@scripts/services.sh stop

clean: ## remove the binary and the private servers' data (.local/)
	-@scripts/services.sh stop
	rm -rf tally .local
