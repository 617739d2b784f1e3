# phalanx developer commands. `make demo` and `make test` are the contract.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test test-deps lint bench demo clean

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

# The store tests run against a real PostgreSQL server, started by the tests
# themselves; the Debian package provides initdb and pg_ctl.
test-deps:
	@if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing PostgreSQL (Debian package postgresql) for the store tests"; \
		SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq postgresql >/dev/null; \
	fi

test: venv test-deps lint
	$(BIN)/pytest

bench: venv
	$(BIN)/python bench/engine.py --json
	$(BIN)/python bench/api.py $$(test -f ../shared/peers/slurm/start-slurm.sh && echo --slurm)

demo: venv
	$(BIN)/python demo/run.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
