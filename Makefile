# idemgen: the two commands a newcomer needs are `make demo` and `make test`.
GO ?= go
# A short fuzz run per target in `make test`, counted in executions: Go 1.26
# fails a run bounded by time when a worker is still busy at the deadline
# (go.dev/issue/75804, fixed in Go 1.27), which a loaded machine makes
# likely. Longer with FUZZTIME=1000000x, or FUZZTIME=1m past that fix.
FUZZTIME ?= 50000x
# Form bodies parse slower (net/url): a fifth of the executions, in the same time.
FORMFUZZTIME ?= 10000x
BENCHCOUNT ?= 5
BENCHTIME ?= 2s

.PHONY: test compat test-short lint generate bench bench-model bench-store bench-layouts bench-wait bench-render fuzz golden realspec demo chaos topology citus docs-check check-alerts prometheus-tools

# The modules whose packages make test runs: the toolkit, and examples/, a
# module of its own so that the examples' dependencies (toxiproxy,
# go-retryablehttp, zerolog) never reach the toolkit's users; and
# runtime/idemgin, the gin adapter, a module of its own so that only gin's
# users download gin. golden/ is a module too, compiled by gen's
# TestGoldenCompiles; its routers package runs the generated glue of every
# router as a service.
MODULES := . examples runtime/idemgin
# Runs its argument in every module, stopping at the first failure.
each = for m in $(MODULES); do (cd $$m && $(1)) || exit 1; done

## test: vet, short fuzz runs, the whole suite with the race detector on a real PostgreSQL (the dependencies' floors, go.mod's), then make compat (their newest)
test: lint
	$(MAKE) --no-print-directory fuzz
	$(call each,$(GO) test -race -count=1 -parallel 8 ./...)
	cd golden && $(GO) test -race -count=1 ./routers
	$(MAKE) --no-print-directory compat

## compat: a copy of the tree on the newest pgx, oapi-codegen, kin-openapi and echo, and oapi-codegen/runtime v1.9 (vet and short tests; go.mod requires the lowest that work)
compat:
	GO=$(GO) scripts/compat.sh

## test-short: the edit-test loop: lint, then the suite without its long tests (no race detector)
test-short: lint
	$(call each,$(GO) test -short -count=1 -parallel 8 ./...)
	cd golden && $(GO) test -short -count=1 ./routers

## docs-check: run every command of the guides in temp dirs (needs curl)
docs-check:
	scripts/docs-check.sh -q docs/getting-started.md
	scripts/docs-check.sh -q docs/adopting.md

## check-alerts: promtool's unit tests of every alert in deploy/prometheus, and the rules and dashboard against the exported series
check-alerts: prometheus-tools
	promtool check rules deploy/prometheus/idemgen-rules.yaml
	cd deploy/prometheus && promtool test rules idemgen-rules.test.yaml
	$(GO) test -count=1 ./deploy

## prometheus-tools: promtool and the Prometheus server (Debian's prometheus package), installed when root, for check-alerts and chaos
prometheus-tools:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing Prometheus and promtool (Debian's prometheus package)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
		else \
			echo "this target needs Prometheus and promtool: apt-get install prometheus (as root), or put both on PATH"; exit 1; \
		fi; }

## fuzz: run every fuzz target for FUZZTIME (executions or a duration)
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME) ./runtime/idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalJSON$$' -fuzztime $(FUZZTIME) ./runtime/idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalJSONExclude$$' -fuzztime $(FUZZTIME) ./runtime/idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalFormExclude$$' -fuzztime $(FORMFUZZTIME) ./runtime/idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzFingerprint$$' -fuzztime $(FUZZTIME) ./runtime/idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzBodyKey$$' -fuzztime $(FUZZTIME) ./runtime/idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./spec
	$(GO) test -run '^$$' -fuzz '^FuzzHeaders$$' -fuzztime $(FUZZTIME) ./runtime/idem
	cd examples && $(GO) test -run '^$$' -fuzz '^FuzzRequestPath$$' -fuzztime $(FUZZTIME) ./payments/api

## lint: formatting, go vet, the examples' generated code against their specs, idemgen vet on the examples' phases, and the docs' citations (every test and make target they name exists)
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(call each,$(GO) vet ./...)
	cd examples/payments/api && $(GO) tool idemgen generate -check -config idemgen.yaml ../api.yaml
	cd examples/stripelike/api && $(GO) tool idemgen generate -check -config idemgen.yaml ../api.yaml
	cd examples && $(GO) tool idemgen vet ./...
	$(GO) test -count=1 -run '^TestTheDocsCiteWhatExists$$' ./internal/docscite

## generate: run every go:generate directive
generate:
	$(call each,$(GO) generate ./...)

## bench: the engine against plain and plain-tx handlers, 1 and 16 clients, on a durable PostgreSQL, in BENCHCOUNT interleaved rounds; then the guard (scripts/benchguard.txt): ratios against their floors, allocations against their ceilings, reported, never failed
bench:
	IDEMGEN_PG_DURABLE=1 IDEMGEN_BENCH_ROUNDS=$(BENCHCOUNT) $(GO) test -run '^$$' -bench '^BenchmarkEngine$$' -benchtime $(BENCHTIME) -count 1 -timeout 60m ./runtime/idemecho | tee bench.out
	@echo; awk -f scripts/benchtable.awk bench.out > bench.table.out; cat bench.table.out
	@echo; $(GO) run ./internal/benchguard scripts/benchguard.txt < bench.table.out

## bench-model: what the protocol's SQL alone costs: pgbench runs each request shape on the engine's tables (durable)
bench-model:
	$(GO) run ./internal/pgbenchmodel

## bench-store: the store at scale on a durable PostgreSQL: claim latency at 0, 1M and 5M records, pruning, bytes per record, HOT refreshes
bench-store:
	$(GO) run ./internal/storebench $(STOREBENCHFLAGS)

## bench-wait: how soon duplicates waiting for an execution in flight are answered once it ends (same engine, another), and the statements a second their waiting costs (durable)
bench-wait:
	$(GO) run ./internal/storebench -waits

## bench-render: replay.render against byte-for-byte storage: bytes per record of a 1.2 KB and a 100 KB answer, and a replay's latency from the record and from the cache at 1 and 16 clients, interleaved (durable)
bench-render:
	$(GO) run ./internal/storebench -render

## bench-layouts: bytes per record of today's records table and of the candidate layouts of issue 12, on 1M completed records each
bench-layouts:
	$(GO) run ./internal/storebench -layouts

## golden: rewrite the golden cases from the generator's output (review the diff)
golden:
	$(GO) test ./gen -run '^TestGolden$$' -update

## realspec: x-idempotency on every POST/PATCH of SPEC, generate, go build, time and peak memory against oapi-codegen (OVERLAY=, CONFIG=, RUNS=)
realspec:
	@test -n "$(SPEC)" || { echo "usage: make realspec SPEC=path/to/openapi.json [OVERLAY=file] [CONFIG=file] [RUNS=n]"; exit 2; }
	$(GO) run ./internal/realspec -spec $(SPEC) $(if $(OVERLAY),-overlay $(OVERLAY)) $(if $(CONFIG),-config $(CONFIG)) $(if $(RUNS),-runs $(RUNS))

## demo: build the payments example and tell its story on a throwaway PostgreSQL (or DATABASE_URL)
demo:
	cd examples && $(GO) build -o ../bin/payments ./payments/cmd/payments
	cd examples && $(GO) run ./payments/cmd/demo -server ../bin/payments

## chaos: the long chaos round (>= 5000 intents, 50 kills, 200 connection faults, a PostgreSQL restart), with Prometheus evaluating the alerts
chaos: prometheus-tools
	cd examples && $(GO) build -race -o ../bin/payments ./payments/cmd/payments
	cd examples && $(GO) build -race -o ../bin/cardnet ./payments/cmd/cardnet
	cd examples && $(GO) run ./payments/cmd/chaos -payments ../bin/payments -cardnet ../bin/cardnet -prometheus "$$(command -v prometheus)" $(CHAOSFLAGS)

## topology: failover (pg_auto_failover) and pooler (PgBouncer) rounds of the payments example, and the HAProxy round alone with TOPOLOGYFLAGS=-rounds=proxy; installs the Debian packages when root (docs/reliability.md)
topology: prometheus-tools
	cd examples && $(GO) build -o ../bin/payments ./payments/cmd/payments
	cd examples && $(GO) build -o ../bin/cardnet ./payments/cmd/cardnet
	cd examples && GO=$(GO) $(GO) run ./payments/cmd/topology -repo .. -payments ../bin/payments -cardnet ../bin/cardnet -prometheus "$$(command -v prometheus)" $(TOPOLOGYFLAGS)

## citus: the engine's suite and the conformance cases (records by id, and placed by tenant), a chaos round with a worker killed, a worker down, throughput in both layouts, and capacity as workers are added (-rounds=scale) on a Citus cluster from local binaries (Citus installed, or CITUS_SRC=dir with its install.sh; docs/scaling.md)
citus:
	cd examples && $(GO) build -o ../bin/payments ./payments/cmd/payments
	cd examples && $(GO) build -o ../bin/cardnet ./payments/cmd/cardnet
	cd examples && GO=$(GO) $(GO) run ./payments/cmd/citus -repo .. -payments ../bin/payments -cardnet ../bin/cardnet $(CITUSFLAGS)
