# Set-up and checks. Every target installs into .venv first (created if missing).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export SMARTUNE_GLUE_DIR ?= $(if $(wildcard ../shared/data/glue),$(abspath ../shared/data/glue),)
# Python's default: compiled modules are cached (__pycache__, ignored by git). A shell that sets
# PYTHONDONTWRITEBYTECODE (this sandbox's does) makes every process compile the project's modules again, and
# every pytest process rewrite and compile all 254 test modules: collecting took 20 CPU-s a process, 12 cached.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install lock run stop test test-integration test-all test-durations deploy-test bench research mutation lint format clean

# The versions come from the lock (constraints: what pyproject.toml's ranges resolved to at `make lock`).
$(STAMP): pyproject.toml requirements-dev.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --constraint requirements-dev.lock -e '.[dev,bench,postgres,s3]'
	# smart-pytorch (bench) depends on data-science-types: 2020 stubs for numpy, pandas and matplotlib that
	# shadow those packages' own annotations and fail mypy on correct numpy code. Stubs only: nothing imports it.
	$(BIN)/python -m pip uninstall -q -y data-science-types
	touch $(STAMP)

# Re-resolves the locks from pyproject.toml's ranges (needs the package index): requirements.lock for
# deployments (the images install with it), requirements-dev.lock for `make install`. torch is pinned in
# pyproject.toml itself and left out: its CPU, CUDA and macOS builds come from different indexes.
LOCK_FLAGS := --python-version 3.11 --universal --no-emit-package torch --quiet
lock: install
	$(BIN)/uv pip compile pyproject.toml --extra postgres --extra s3 $(LOCK_FLAGS) -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra bench --extra postgres --extra s3 $(LOCK_FLAGS) -o requirements-dev.lock

install: $(STAMP)

# The embedded deployment: SQLite + MLflow + Tune storage in ~/.smartune (SMARTUNE_DATA_DIR), a local Ray
# head unless RAY_ADDRESS is set, the API on http://127.0.0.1:8000 (SMARTUNE_HOST / SMARTUNE_PORT).
run: install
	$(BIN)/smartune serve

# Stops what `make run` started (the service and its Ray head), also after a crash left them behind.
stop: install
	$(BIN)/smartune stop

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy smart_core worker service cli smartune bench research examples

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The test tiers (docs/testing.md § Tiers): tests/conftest.py marks each test `unit`, `integration` or `slow`
# from what it starts. The unit tier runs on UNIT_WORKERS xdist workers (2: this machine's cores) under the
# guard that fails a unit test which starts a process or binds a socket. The integration and slow tiers run
# on INTEGRATION_WORKERS xdist workers: most of their time is spent waiting (servers starting, Ray
# scheduling, polls), so two workers overlap the waits; each worker starts its own Ray cluster, Ray head and
# PostgreSQL server on free ports, and a module's tests share a worker (--dist loadscope: its module-scoped
# fixtures, a compose stack or an MLflow server, are built once), handed out in collection order, longest
# module first (tests/support/durations.py; --no-loadscope-reorder, or xdist hands out the modules with the
# most tests first). It prints its 25 slowest tests (CI's log says where the time goes). pytest's exit
# status 5 (no test selected) is no failure.
PYTEST := $(BIN)/python -m pytest -q
UNIT_WORKERS ?= 2
INTEGRATION_WORKERS ?= 2
UNIT_TESTS := SMARTUNE_UNIT_GUARD=1 $(PYTEST) -m unit -n $(UNIT_WORKERS)
INTEGRATION_TESTS := $(PYTEST) -n $(INTEGRATION_WORKERS) --dist loadscope --no-loadscope-reorder --durations=25
OK_IF_NONE := || [ $$? -eq 5 ]

test: lint
	$(UNIT_TESTS) $(OK_IF_NONE)

test-integration: install
	$(INTEGRATION_TESTS) -m integration $(OK_IF_NONE)

# Every tier, recording each test's seconds in tests/durations.json: the tiers start their slowest modules
# first from that record (tests/support/durations.py). Commit it when the suite's shape changed.
test-durations:
	SMARTUNE_TEST_DURATIONS_OUT=$(abspath tests/durations.json) $(MAKE) test-all

# Every tier in one session: the unit tests (under the unit guard, which checks only them) fill the cores
# while the integration tests wait on servers, and the suite is collected by one controller and two workers,
# not twice (some 20 CPU-s a process).
test-all: lint
	SMARTUNE_UNIT_GUARD=1 $(INTEGRATION_TESTS) $(OK_IF_NONE)

# docker-compose.yml for real (docs/deployment.md, "The compose stack test"): a Docker engine installed and
# started if need be (as root), a Debian base image made with debootstrap (once, then cached), the images
# built, the stack up, a job through its API, the Ray head killed mid-job, the stack down. Also part of
# test-all (the `slow` tier), where it skips, saying why, if no engine can start or the disk cannot hold the
# images. Measurements: out/compose_stack.json.
deploy-test: install
	$(BIN)/python -m tests.support.docker_engine
	$(PYTEST) --durations=10 tests/integration/test_compose_stack.py

# Mutation testing of smart_core against tests/smart_core (about 35 minutes on 2 cores): the surviving
# mutants and why each is harmless are listed in docs/testing.md.
mutation: install
	$(BIN)/mutmut run --max-children 2
	$(BIN)/mutmut results

bench: install
	mkdir -p bench/results
	$(BIN)/smartune bench step --model minilm-l6 --rs-dropout shared,off \
	  --batch-size 16 --seq-len 64 --json | tee bench/results/step.json
	$(BIN)/smartune bench api --json | tee bench/results/api.json
	$(BIN)/smartune bench load $(if $(BENCH_DATABASE_URL),--database-url sqlite --database-url '$(BENCH_DATABASE_URL)') \
	  | tee bench/results/load.json
	$(BIN)/smartune bench load --noisy-neighbour $(if $(BENCH_DATABASE_URL),--database-url sqlite --database-url '$(BENCH_DATABASE_URL)') \
	  | tee bench/results/load_noisy_neighbour.json
	$(BIN)/smartune bench sweep --model minilm-l6 --task rte --trainings 8 --min-seconds 120 \
	  | tee bench/results/orchestration.json
	$(BIN)/smartune bench dashboard --trials 500 --epochs 10 --out bench/results/dashboard.json
	$(BIN)/smartune bench startup --json | tee bench/results/startup.json
	$(BIN)/smartune bench job-startup --json | tee bench/results/job_startup.json
	$(BIN)/python -m bench.estimate --json | tee bench/results/estimate.json

# Research (research/README.md; not shipped): the measurements behind docs/pool_at_scale.md,
# docs/memory_packing.md and the README's numerics table.
research: install
	mkdir -p research/results
	$(BIN)/python -m research.numerics --json | tee research/results/numerics.json
	$(BIN)/python -m research.pool_sim   # research/results/pool_sim.json, docs/img/pool_sim.png (~7 min)
	$(BIN)/python -m research.memory_fit   # service/costs/memory.json from research/results/memory_h200.json (< 1 s)
	$(BIN)/python -m research.reproduction.coverage --json > research/results/coverage_n5.json   # (~10 s)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache out mutants
