# The two commands of the README:
#   make demo   the main job on its embedded default (a simulated cluster: fault -> remediation -> resume)
#   make test   the whole test suite (installs Slurm 22.05 + munge, and Debian's chromium +
#               chromium-driver for the console tests, when missing; builds Slurm 25.11 from
#               ../shared/vendor once; starts and stops its own lab clusters, runs ruff,
#               mypy --strict and pytest: everything on 22.05, then the Slurm-marked tests on
#               25.11 through each backend: cli, pyslurm, rest)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test lint unit bench bench-lab reliability lab-up lab-down clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

demo: setup
	$(BIN)/slurm-heal demo

lint: setup
	$(BIN)/ruff check slurm_heal tests benchmarks
	$(BIN)/mypy

# Pure logic only: fast, no Slurm needed.
unit: setup
	$(BIN)/pytest -m "not slurm"

# The Slurm version x backend matrix (SPEC I6). Without the 25.11 source the 25.11 passes
# skip with the reason (CI=true: fail).
MATRIX_2511 := cli pyslurm rest

test: setup
	contrib/lab/lab install --browser
	contrib/lab/lab install --slurm 25.11 --if-available
	$(MAKE) lint
	$(BIN)/pytest
	set -e; for b in $(MATRIX_2511); do \
	  $(BIN)/pytest -m slurm --slurm 25.11 --slurm-backend $$b; done

# The reliability suites' long profile (docs/reliability.md); the CI profile runs in `make test`.
reliability: setup
	contrib/lab/lab install
	SLURM_HEAL_RELIABILITY=long $(BIN)/pytest -m reliability -s

# Every benchmark, one table (README "Performance"); bench-lab adds fault-to-drain on a
# private Slurm lab (slow).
bench: setup
	$(BIN)/python benchmarks/run.py

bench-lab: setup
	$(BIN)/python benchmarks/run.py --lab

# A lab of your own on 127.0.0.1 (state in .lab/): `eval "$$(contrib/lab/lab env)"` then
# `slurm-heal status` talks to it. The test suite starts a private one of its own.
lab-up: setup
	contrib/lab/lab install
	contrib/lab/lab up

lab-down:
	contrib/lab/lab down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
