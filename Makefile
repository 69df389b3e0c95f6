# Development entry points. Every target installs what it needs into .venv first.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
USER_ID := $(shell id -un)
RUNDIR  ?= /tmp/gpuallocd-$(USER_ID)
TOPOLOGY ?= example:workstation-4gpu-nvbridge
TEST_WORKERS ?= 4

.PHONY: daemon test bytecode system-test lint check bench clean

# The venv is filled by pip, or by uv where one is on PATH or named (`make UV=path/to/uv`):
# the same packages from the same index, resolved and installed in seconds instead of a minute.
UV ?= $(shell command -v uv 2>/dev/null)
PACKAGES := -e ./client -e '.[dev]' -e ./contrib/jupyter

# Where PYTHONDONTWRITEBYTECODE is set (many container images set it), Python writes no
# bytecode and compiles every module it imports again at every start: a daemon's start takes
# 3.5 s of CPU instead of 1.1 s. So the venv's packages are compiled when it is filled (pip
# does by default; uv when asked), and the checkout's modules before the suite, the system
# tests, the daemon and the benchmarks (`bytecode`: only what changed).

$(STAMP): pyproject.toml client/pyproject.toml contrib/jupyter/pyproject.toml
	$(PYTHON) -m venv $(VENV)
ifneq ($(strip $(UV)),)
	$(UV) pip install --quiet --compile-bytecode --python $(PY) $(PACKAGES)
else
	$(PY) -m pip install --quiet $(PACKAGES)
endif
	touch $(STAMP)

## Start the daemon in the foreground on a bundled example topology (no GPU needed).
## --init creates the ledger on first use; it never touches one that has data.
daemon: $(STAMP) bytecode
	@echo "socket: $(RUNDIR)/gpuallocd.sock  (export GPUALLOCD_SOCKET=$(RUNDIR)/gpuallocd.sock)"
	$(VENV)/bin/gpuallocd --init --inventory $(TOPOLOGY) \
		--socket $(RUNDIR)/gpuallocd.sock --state-dir $(RUNDIR)/state

## Run the test suite, on TEST_WORKERS processes (pytest-xdist). Much of it waits on daemons,
## processes and timers, so more workers than CPUs pay; plain `pytest` runs it on one.
## Work-stealing: a worker whose share ran out takes tests from the others' (no idle tail).
## TESTS narrows it (CI's second Python: `make test TESTS="tests/test_x.py ..."`).
test: $(STAMP) bytecode
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal $(TESTS)

bytecode: $(STAMP)
	@$(PY) -m compileall -q -j0 gpuallocd client contrib tests benchmarks >/dev/null

## The service as shipped, under a real systemd (PID 1) in a systemd-nspawn container,
## installed as the README says (tests/system; needs root, systemd-container, debootstrap).
system-test: $(STAMP) bytecode
	$(PY) -m pytest -m system tests/system

## ruff, ruff format and mypy (strict on gpuallocd/ and the Python of contrib/).
lint: $(STAMP)
	$(VENV)/bin/ruff check gpuallocd client tests contrib benchmarks
	$(VENV)/bin/ruff format --check gpuallocd client tests contrib benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy contrib/slurm contrib/docker

check: lint test

## Benchmarks against a fresh daemon, printed as one table (docs/performance.md).
## genv is compared when installed: on PATH, or GENV_PYTHON=a Python that imports it.
bench: $(STAMP) bytecode
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
