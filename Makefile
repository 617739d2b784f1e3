# phalanx developer commands. `make demo` and `make test` are the contract.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test lint bench demo clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

lint: venv
	$(BIN)/ruff check src tests bench demo
	$(BIN)/ruff format --check src tests bench demo
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

bench: venv
	$(BIN)/python bench/engine.py --json

demo: venv
	$(BIN)/python demo/engine_demo.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
