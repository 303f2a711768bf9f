# idemgen: the two commands a newcomer needs are `make demo` and `make test`.
GO ?= go
# A short fuzz run per target in `make test`; longer with FUZZTIME=1m.
FUZZTIME ?= 5s
BENCHCOUNT ?= 5
BENCHTIME ?= 2s

.PHONY: test test-short lint generate bench bench-store fuzz golden realspec demo chaos docs-check

## test: vet, short fuzz runs, the whole suite with the race detector on a real PostgreSQL
test: lint
	$(MAKE) --no-print-directory fuzz
	$(GO) test -race -count=1 ./...

## test-short: the edit-test loop: lint, then the suite without its long tests (no race detector)
test-short: lint
	$(GO) test -short -count=1 ./...

## docs-check: run every command of docs/getting-started.md in a temp dir (needs curl)
docs-check:
	scripts/getting-started.sh -q

## fuzz: run every fuzz target for FUZZTIME
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME) ./runtime/idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalJSON$$' -fuzztime $(FUZZTIME) ./runtime/idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzBodyKey$$' -fuzztime $(FUZZTIME) ./runtime/idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./spec
	$(GO) test -run '^$$' -fuzz '^FuzzRequestPath$$' -fuzztime $(FUZZTIME) ./examples/payments/api

## lint: formatting and go vet
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## generate: run every go:generate directive
generate:
	$(GO) generate ./...

## bench: the engine against plain and plain-tx handlers, 1 and 16 clients, on a durable PostgreSQL
bench:
	IDEMGEN_PG_DURABLE=1 $(GO) test -run '^$$' -bench '^BenchmarkEngine$$' -benchtime $(BENCHTIME) -count $(BENCHCOUNT) ./runtime/idemecho | tee bench.out
	@echo; awk -f scripts/benchtable.awk bench.out

## bench-store: the store at scale on a durable PostgreSQL: claim latency at 0, 1M and 5M records, pruning, bytes per record, HOT refreshes
bench-store:
	$(GO) run ./internal/storebench $(STOREBENCHFLAGS)

## golden: rewrite the golden cases from the generator's output (review the diff)
golden:
	$(GO) test ./gen -run '^TestGolden$$' -update

## realspec: overlay x-idempotency on every POST/PATCH of SPEC, generate, compile, time against oapi-codegen
realspec:
	@test -n "$(SPEC)" || { echo "usage: make realspec SPEC=path/to/openapi.json"; exit 2; }
	$(GO) run ./internal/realspec -spec $(SPEC)

## demo: build the payments example and tell its story on a throwaway PostgreSQL (or DATABASE_URL)
demo:
	$(GO) build -o bin/payments ./examples/payments/cmd/payments
	$(GO) run ./examples/payments/cmd/demo -server bin/payments

## chaos: the long chaos round (>= 5000 intents, 50 kills, 200 connection faults, a PostgreSQL restart)
chaos:
	$(GO) build -race -o bin/payments ./examples/payments/cmd/payments
	$(GO) build -race -o bin/cardnet ./examples/payments/cmd/cardnet
	$(GO) run ./examples/payments/cmd/chaos -payments bin/payments -cardnet bin/cardnet $(CHAOSFLAGS)
