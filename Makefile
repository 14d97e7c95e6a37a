# Two commands do all set-up on a fresh machine:
#   make demo   create .venv, install, build evidence for the example bundles
#   make test   install the test tools and run everything (unit, golden, ruff, mypy)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
OUT    ?= out/demo

.PHONY: demo test lint typecheck unit bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
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
	$(BIN)/pytest --cov=bot/verification --cov-branch --cov-report=term-missing:skip-covered \
	    --cov-fail-under=95

test: lint typecheck unit

bench: $(VENV)/.installed
	$(BIN)/python bench/evidence_scale.py

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
