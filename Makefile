# raftlog developer entry points.
#   make run    set up .venv (first time) and start a three-node cluster on loopback
#   make down   stop it
#   make test   set up .venv and the test tools (kcat, docker-compose), run every test
#   make audit  the epoch audit of the local cluster (PySpark): report in audit/<time>/
#   make lint   ruff check + ruff format --check, then mypy (pyproject.toml [tool.mypy])
#   make faults network fault suite (root): nodes in network namespaces, CYCLES fault cycles
#   make sim    the Raft core's seeded simulation, SEEDS schedules
#   make compose-test  docker-compose.yml for real (root: Docker engine, images, three containers)

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

DATA ?= data
NODES ?= 3
KAFKA_PORT ?= 9092
PYTEST_ARGS ?=
COMPILED_MODULES := $(shell cat compiled_modules.txt)
COMPILED := compiled.sha256

.PHONY: run down status audit audit-scale venv sysdeps test lint clean faults fuzz sim compose-test \
	compiled clean-compiled

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "raftlog needs Python 3.11; $(PYTHON) is " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --disable-pip-version-check -q -e '.[audit,test]'
	@touch $@

venv: $(STAMP) $(COMPILED)

# mypyc (issue 45; docs/architecture.md, "Compiled modules"): the hot modules listed in
# compiled_modules.txt become C extensions beside their .py files, rebuilt whenever one of
# them changes. compiled.sha256 records the sources built; importing raftlog refuses an
# extension whose source changed since (raftlog/compiled.py). Without a C compiler the
# build says so and the .py files run. `make clean-compiled` goes back to pure Python;
# RAFTLOG_PURE=1 runs the .py files without removing the build.
CLEAN_COMPILED := find raftlog kafka_api -name '*.cpython-*.so' -delete; \
	rm -f *__mypyc.cpython-*.so $(COMPILED) $(COMPILED).new

$(COMPILED): compiled_modules.txt $(COMPILED_MODULES) | $(STAMP)
	@$(CLEAN_COMPILED)
	@echo "mypyc: compiling $(words $(COMPILED_MODULES)) modules (log: build/mypyc.log)"
	@sha256sum $(COMPILED_MODULES) > $@.new; mkdir -p build; \
	if $(BIN)/mypyc --no-warn-unused-configs $(COMPILED_MODULES) > build/mypyc.log 2>&1; then \
		mv $@.new $@; \
	else \
		echo "mypyc: compile failed (no C compiler? build/mypyc.log): pure Python runs;" \
			"make clean-compiled compiled retries"; \
		$(CLEAN_COMPILED); : > $@; \
	fi

compiled: $(COMPILED)

clean-compiled:
	@$(CLEAN_COMPILED)

# System tools the tests use; installed only when missing.
sysdeps:
	@missing=""; \
	command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v java >/dev/null 2>&1 || missing="$$missing openjdk-17-jre-headless"; \
	command -v iptables >/dev/null 2>&1 || missing="$$missing iptables"; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	command -v go >/dev/null 2>&1 || missing="$$missing golang-go"; \
	[ -d $(SARAMA_SRC) ] || missing="$$missing golang-github-shopify-sarama-dev"; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc libc6-dev"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

run: venv
	$(BIN)/raftlog cluster up --nodes $(NODES) --data $(DATA) --kafka-port $(KAFKA_PORT)

down: venv
	$(BIN)/raftlog cluster down --data $(DATA)

status: venv
	$(BIN)/raftlog cluster status --data $(DATA)

audit: venv
	$(BIN)/raftlog audit --data $(DATA)

# The epoch audit of a generated million-event history (a long run: not in make test).
audit-scale: venv
	RAFTLOG_AUDIT_EVENTS=1000000 $(BIN)/pytest -q tests/e2e/test_audit_scale.py

# kafkajs, pinned by its lock file, for tests/e2e/test_kafkajs.py.
KAFKAJS := tests/clients/kafkajs/node_modules/.installed
$(KAFKAJS): tests/clients/kafkajs/package-lock.json | sysdeps
	npm ci --prefix tests/clients/kafkajs --no-audit --no-fund --loglevel=error
	@touch $@

# The suite runs against the compiled build (make compiled); then, when there is one, the
# compiled modules' own unit tests and a quarter of the simulation's schedules again as pure
# Python (RAFTLOG_PURE=1; the same code, so fewer schedules: CI's 35-minute budget).
PURE_TESTS ?= $(addprefix tests/unit/,test_raft_*.py test_journal*.py test_mesh.py test_batch.py \
	test_records.py test_log.py test_storage_bounds.py test_window_rewrite.py test_kafka_*.py \
	test_compiled.py)
# sarama as Debian ships it (GOPATH mode: no module download), for tests/e2e/test_sarama.py.
SARAMA_SRC := /usr/share/gocode/src/github.com/Shopify/sarama
SARAMA := build/sarama-client
$(SARAMA): $(wildcard tests/clients/sarama/*.go) | sysdeps
	GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE=$(CURDIR)/build/go-cache \
		CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go build -o $@ ./tests/clients/sarama

test: venv sysdeps $(KAFKAJS) $(SARAMA)
	$(BIN)/pytest -q $(PYTEST_ARGS)
	@if [ -s $(COMPILED) ]; then \
		echo "pure Python (RAFTLOG_PURE=1): the compiled modules' unit tests"; \
		RAFTLOG_PURE=1 RAFTLOG_SIM_SEEDS=250 RAFTLOG_SIM_STORAGE_SEEDS=125 RAFTLOG_SIM_DETECT_SEEDS=60 \
			RAFTLOG_SIM_MEMBERSHIP_SEEDS=125 RAFTLOG_SIM_MEMBERSHIP_STORAGE_SEEDS=12 \
			$(BIN)/pytest -q $(PURE_TESTS); \
	fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# Network fault suite (tests/faults/): three nodes, each in its own network namespace behind
# a bridge; isolations, one-way and lossy links, pauses, kill -9, slow links; acks=all
# producers throughout and a checker at the end. Needs root, iproute2 and iptables. Prints
# a line per cycle and a table per fault kind; the run directory is kept (path printed).
# `make faults CYCLES=50 FAULTS_ARGS='--seed 7 --rate 500'`
# MOVES: partitions of the reassignment workload's topic (RF 2, moved between node pairs
# throughout, some moves cancelled; tests/faults/moves.py); 0 turns it off.
CYCLES ?= 300
MOVES ?= 4
FAULTS_ARGS ?=

faults: venv
	$(BIN)/python -m tests.faults.run --cycles $(CYCLES) --moves $(MOVES) $(FAULTS_ARGS)

# Hostile requests against a real cluster: the in-suite run sends 400, this many more.
FUZZ_EXAMPLES ?= 20000
fuzz: venv
	RAFTLOG_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q -s tests/e2e/test_fuzz.py

# The seeded simulation of the pure Raft core (tests/unit/test_raft_sim.py): the suite runs
# 2,000 schedules, this runs SEEDS; and 1,000 over each replica's real partition storage
# (torn files, crashes inside a Ready's writes and a cleaner's pass; two processes), this
# runs STORAGE_SEEDS; membership change (tests/unit/test_raft_membership.py) 1,000 and 100 on
# the storage, this runs MEMBERSHIP_SEEDS and MEMBERSHIP_STORAGE_SEEDS. A failure prints its
# seed and the command that replays it. The failure-detection schedules (a quiet group's
# leader killed or cut off, half of them with clients writing to it around the fault, led
# again within 5 s, the old leader stopped first), and as many with the old leader's node held
# through the fault (HELD): 500 each in the suite, this runs DETECT_SEEDS each.
SEEDS ?= 100000
STORAGE_SEEDS ?= 5000
MEMBERSHIP_SEEDS ?= 20000
MEMBERSHIP_STORAGE_SEEDS ?= 3000
DETECT_SEEDS ?= 20000
sim: venv
	RAFTLOG_SIM_SEEDS=$(SEEDS) RAFTLOG_SIM_STORAGE_SEEDS=$(STORAGE_SEEDS) \
	RAFTLOG_SIM_MEMBERSHIP_SEEDS=$(MEMBERSHIP_SEEDS) \
	RAFTLOG_SIM_MEMBERSHIP_STORAGE_SEEDS=$(MEMBERSHIP_STORAGE_SEEDS) \
	RAFTLOG_SIM_DETECT_SEEDS=$(DETECT_SEEDS) \
	$(BIN)/pytest -q tests/unit/test_raft_sim.py tests/unit/test_raft_membership.py

# raftlog side by side with Tansu (bench/run.py): table on stdout, bench/results/.
# `make bench BENCH_ARGS=--quick` for small sizes and one run.
BENCH_ARGS ?=
BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --disable-pip-version-check -q -e '.[audit,test,bench]'
	@touch $@

.PHONY: bench
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# A host's loss and 1,000 partitions over 3 hosts of 4 brokers (bench/hosts.py, issue 45):
# 12 brokers and 3 supervisors, each capped with prlimit; not in `make bench` or `make test`.
# `make bench-hosts BENCH_HOSTS_ARGS=--quick` for fewer records and a shorter idle span.
BENCH_HOSTS_ARGS ?=
.PHONY: bench-hosts
bench-hosts: $(BENCH_STAMP)
	$(BIN)/python -m bench.hosts $(BENCH_HOSTS_ARGS)

# docker-compose.yml for real (tests/compose/README.md): builds the images, starts the three
# node containers, produces and reads back from the host, kills the container leading a
# partition, produces on, brings it back, runs the audit profile's container and reads its
# report. Starts Debian's dockerd (root) when no daemon answers, without touching iptables,
# and stops it after; builds its base image from Debian's packages when python:3.11-slim
# cannot be pulled. `make compose-test COMPOSE_ARGS=--keep` leaves it all running.
COMPOSE_ARGS ?=
compose-test: venv
	@missing=""; \
	command -v dockerd >/dev/null 2>&1 || missing="$$missing docker.io"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	command -v debootstrap >/dev/null 2>&1 || missing="$$missing debootstrap"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	$(BIN)/python -m tests.compose.run $(COMPOSE_ARGS)
