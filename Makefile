# The two commands of the README:
#   make demo   the main job on its embedded default (a simulated cluster: fault -> remediation -> resume)
#   make test   the whole test suite (installs Slurm 22.05 + munge, and Debian's chromium +
#               chromium-driver for the console tests, when missing; builds Slurm 25.11 and
#               26.05 from ../shared/vendor once; starts and stops its own lab clusters, runs
#               ruff, mypy --strict and pytest: everything on 22.05, then the Slurm-marked
#               tests on 25.11 through each backend, cli, pyslurm, rest, and on 26.05
#               through cli and rest)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test test-pass-unit lint unit bench bench-lab reliability lab-up lab-down clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[controller,dev]'
	touch $@

demo: setup
	$(BIN)/slurm-heal demo

lint: setup
	$(BIN)/ruff check slurm_heal tests benchmarks
	$(BIN)/mypy

# Pure logic only: fast, no Slurm needed.
unit: setup
	$(BIN)/pytest -m "not slurm"

# The Slurm version x backend matrix (SPEC I6), as passes: the pure-logic tests, then the
# Slurm-marked tests on 22.05 (the two together are the whole suite on 22.05), on 25.11
# through cli, pyslurm and rest, on 26.05 through cli and rest (pyslurm has no 26.05). The
# passes run side by side, TEST_JOBS at a time, the long ones first (each starts its own
# lab in a directory of its own on free ports, so they never collide; a cli pass is
# mostly waiting on Slurm: 11-13.5 min alone or with others beside it, the pure-logic
# pass 4.3 min, each pyslurm/rest pass 2.7-2.9 min), each pass's output
# printed whole when it ends; lint runs beside them. Every pass runs even when another
# fails (-k) and `make test` fails when any did; a pass that collected nothing (pytest
# exit 5) has failed too. A Slurm version with neither its build nor its source skips its tests
# with the reason and the command that adds it (CI=true: fail).
PASSES := 22.05-cli 25.11-cli 26.05-cli unit 25.11-pyslurm 25.11-rest 26.05-rest
TEST_JOBS ?= 4

test: setup
	contrib/lab/lab install --browser
	contrib/lab/lab install --slurm 25.11 --if-available
	contrib/lab/lab install --slurm 26.05 --if-available
	$(MAKE) --no-print-directory -k -O -j$(TEST_JOBS) lint $(addprefix test-pass-,$(PASSES))

# One pass: `make test-pass-unit`, `make test-pass-26.05-rest`, ...
test-pass-unit: setup
	@start=$$(date +%s); $(BIN)/pytest -p no:cacheprovider -m "not slurm"; rc=$$?; \
	  echo "pass unit: exit $$rc, $$(( $$(date +%s) - start )) s"; \
	  [ $$rc -eq 0 ]

test-pass-%: setup
	@start=$$(date +%s); $(BIN)/pytest -p no:cacheprovider -m slurm \
	  --slurm $(word 1,$(subst -, ,$*)) --slurm-backend $(word 2,$(subst -, ,$*)); rc=$$?; \
	  echo "pass $*: exit $$rc, $$(( $$(date +%s) - start )) s"; \
	  [ $$rc -eq 0 ]

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
