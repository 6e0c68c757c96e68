# `make demo` and `make test` work on a fresh machine: each creates .venv if it is
# missing and installs the pinned set (constraints.txt) before it runs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install services demo test wheel-test audit lint typecheck docs bench bench-quick soak clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev,prod,nn,formats]'
	touch $(STAMP)

install: $(STAMP)

# PostgreSQL, Redis (and Chromium, Java/Maven) for the production-profile tests: installed from
# Debian's packages where missing, configured and started (needs root; .ci/run calls it too).
services:
	bash .ci/services
	bash .ci/kafka/broker fetch

demo: install
	$(BIN)/mlpipe demo

lint: install
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy

docs: install
	$(BIN)/mkdocs build --strict --site-dir build/site

# Four workers, one test file each at a time: much of the suite waits on real
# servers, brokers and subprocesses, so on two cores more files in flight fill the
# waits (1,560 tests, pytest's own time: -n 3 12:54-13:36 over three runs, CPU 164-173 %;
# -n 4 12:35, CPU 180 %).
# --no-loadscope-reorder: files go out in the order tests/conftest.py gives them
# (longest first), not xdist's default of most tests first, which sent the slow
# one-test files out last (a tail of 70-80 s on one worker while the others idled).
test: install lint typecheck docs
	$(BIN)/pytest -n 4 --dist loadfile --no-loadscope-reorder

# The wheel as a user gets it: build it, install it (--no-deps) in a fresh venv that borrows
# this one's dependencies, and run init -> register -> deploy -> serve -> predict -> sync in an
# empty directory with the installed `mlpipe` (tests/integration/test_wheel.py; `test` runs it too).
wheel-test: install
	$(BIN)/pytest -p no:xdist -q tests/integration/test_wheel.py

# pip-audit over constraints.txt (.ci/audit says SKIPPED where PyPI's JSON API is unreachable).
audit: install
	bash .ci/audit

# Benchmarks (bench/README.md). Both start servers on loopback and stop them
# (process groups) on exit or failure; neither asserts a timing.
bench: install
	$(BIN)/python -m bench.run

bench-quick: install
	$(BIN)/python -m bench.run --quick

# Not in CI: 10 minutes of steady load, RSS of each server process (SOAK_ARGS="--minutes 1").
soak: install
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

clean:
	rm -rf .mlpipe build/site
