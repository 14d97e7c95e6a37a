# Two commands do all set-up on a fresh machine:
#   make demo   create .venv, install, build evidence for the example bundles
#   make test   bring up the services the tests need (scripts/test-services), install the
#               test tools and run everything (ruff, mypy, every test)
# and, without any service or root:
#   make unit-fast   ruff, mypy and the tests not marked `services`
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
OUT    ?= out/demo
# Test processes at once (pytest-xdist). Much of a test's time is spent waiting on the
# processes and servers it starts, so twice the cores keeps both cores busy (84% of the
# run); a fifth worker made the run longer (781 s against 743 s) and the load tests flaky.
TEST_WORKERS ?= 4
# Tests are handed out two at a time, so the long ones (marked `long`, collected first)
# start on different workers at once instead of queueing on the first.
PYTEST := $(BIN)/pytest -n $(TEST_WORKERS) --maxschedchunk 2 --durations=30

# A test run starts hundreds of Python processes (the runner, its servers and clients,
# the App's CLI): with bytecode caching off each one compiles its modules again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test services lint typecheck unit unit-fast durations bench clean coverage-select

# uv installs the same pinned packages as pip in seconds rather than a minute (a fresh
# clone's `make test` installs everything); pip does it where uv cannot be had.
UV_VERSION := 0.9.5
INSTALL = $(BIN)/uv pip install -q --python $(BIN)/python

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION) || $(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(INSTALL) -e . || $(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(INSTALL) -e '.[test]' || $(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/rsi-bot evidence examples/rsi-bundle-v-2c1f0e-h100.zip \
	    examples/rsi-bundle-v-2c1f0e-h200.zip --candidate examples/candidate.json --out $(OUT)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m tests.layers

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

# The state machine and its steps are where the App's trust lives: their branch
# coverage may not drop below 95%.
unit: $(VENV)/.installed-test
	$(PYTEST) --cov=bot/verification --cov-branch --cov-report=term-missing:skip-covered \
	    --cov-fail-under=95 --durations-json=out/test-durations.json

# Choose again which tests `make unit` traces for coverage (tests/select_coverage.py): the
# whole suite traced, each test its own context, then the fewest tests that reach every
# branch twice. Run it after changing bot/verification or its tests.
coverage-select: $(VENV)/.installed-test
	RSI_COVER_ALL=1 $(PYTEST) --cov=bot/verification --cov-branch --cov-context=test \
	    --cov-report=term:skip-covered
	$(BIN)/python -m tests.select_coverage .coverage

# PostgreSQL, Redis, Chromium, wrk, a C compiler and the runner's candidate users: started
# or installed as root, or the exact command to run. Every test needs them or fails.
services:
	bash scripts/test-services

test: services
	$(MAKE) lint typecheck unit

# The tests marked `services` (PostgreSQL, Redis, Chromium, root) are left out; no
# coverage floor, since the state machine's deployed shape is among them.
unit-fast: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(PYTEST) -m 'not services'

# tests/README.md's tables of where the suite's time goes, from a run like `make unit`.
durations: unit
	$(BIN)/python -m tests.durations out/test-durations.json

bench: $(VENV)/.installed
	$(BIN)/python bench/evidence_scale.py

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
