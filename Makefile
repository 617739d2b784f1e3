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
	$(BIN)/python -m pip install -q -e '.[test,ray,sim]'
	@touch $(STAMP)

lint: venv
	$(BIN)/ruff check src tests bench demo
	$(BIN)/ruff format --check src tests bench demo
	$(BIN)/mypy

# What the tests need beyond the Python packages: PostgreSQL (the store tests
# start a real server), nss_wrapper (virtual node names resolve inside jobs) and
# a CPU build of torch (the sbatch proof trains on 16 ranks with gloo),
# Chromium (the dashboard's browser tests drive it with Playwright) and iproute2
# (the README's walkthroughs run in a network namespace of their own), and the
# container runtime's tools: squashfs-tools and umoci import images, squashfuse and
# fuse3 mount them for jobs that do not run as root, busybox-static and mmdebstrap
# build the test images offline (busybox) and from the Debian archive (Python).
test-deps: venv
	@missing=""; \
	command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	ls /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so 2>/dev/null | grep -q . || missing="$$missing libnss-wrapper"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	command -v mksquashfs >/dev/null 2>&1 || missing="$$missing squashfs-tools"; \
	command -v umoci >/dev/null 2>&1 || missing="$$missing umoci"; \
	command -v squashfuse >/dev/null 2>&1 || missing="$$missing squashfuse"; \
	command -v fusermount3 >/dev/null 2>&1 || missing="$$missing fuse3"; \
	dpkg-query -W -f='$${Status}' busybox-static 2>/dev/null | grep -q "ok installed" || missing="$$missing busybox-static"; \
	command -v mmdebstrap >/dev/null 2>&1 || missing="$$missing mmdebstrap"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0

test: venv test-deps lint
	$(BIN)/pytest

# A benchmark that reads ../shared (PHALANX_SHARED names another folder: traces,
# the real Slurm peer) says on stderr what is missing and skips that part.
bench: venv test-deps
	$(BIN)/python bench/engine.py --json
	$(BIN)/python bench/engine.py --json --backfill --fair-share
	$(BIN)/python bench/engine.py --json --topology
	$(BIN)/python bench/topology.py
	$(BIN)/python bench/api.py $$(test -f "$${PHALANX_SHARED:-../shared}/peers/slurm/start-slurm.sh" && echo --slurm)
	$(BIN)/python bench/cli.py
	$(BIN)/python bench/sbatch.py $$(test -f "$${PHALANX_SHARED:-../shared}/peers/slurm/start-slurm.sh" || echo --no-slurm)
	$(BIN)/python bench/kueue_baseline.py --json
	$(BIN)/python bench/openb.py
	$(BIN)/python bench/ray_runtime.py
	$(BIN)/python bench/sim.py
	$(BIN)/python bench/sim_sweep.py --plot docs/img/sweep.png
	$(BIN)/python bench/dashboard.py
	$(BIN)/python bench/faults.py
	$(BIN)/python bench/faults.py --ha
	$(BIN)/python bench/load.py
	$(BIN)/python bench/kubeapi.py
	$(BIN)/python bench/containers.py

demo: venv
	$(BIN)/python demo/run.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
