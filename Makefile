VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SETUP_LOG := $(VENV)/setup.log

.PHONY: setup run test stress lint bench package-check clean

# The PostgreSQL tests run a throwaway server as the postgres user under libnss_wrapper.
NSS_WRAPPER := /usr/lib/x86_64-linux-gnu/libnss_wrapper.so

$(STAMP): pyproject.toml
	test -e $(NSS_WRAPPER) || [ "$$(id -u)" != 0 ] || \
		apt-get install -y -q libnss-wrapper || (apt-get update -q && apt-get install -y -q libnss-wrapper)
	test -x $(PY) || python3 -m venv $(VENV)
	@# pip's output (setuptools' BuildBackendWarning boxes among it) goes to a log, shown whole
	@# only when the install fails.
	@echo "installing loopdeck and its dev tools (pip's output: $(SETUP_LOG))"
	@$(PY) -m pip install --quiet --upgrade pip >$(SETUP_LOG) 2>&1 \
		&& $(PY) -m pip install --quiet -e '.[dev]' >>$(SETUP_LOG) 2>&1 \
		|| { cat $(SETUP_LOG) >&2; echo "setup failed: pip's output is above and in $(SETUP_LOG)" >&2; exit 1; }
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/loopdeck console

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench sample_envs tools
	$(VENV)/bin/ruff format --check src tests bench sample_envs tools
	$(VENV)/bin/mypy src

# Six workers (pytest-xdist), each test file whole on one: most of a test's time is waiting on
# a subprocess, a server or a console (two workers kept 0.9 of a core busy: 162 s; four, 1.5
# cores: 124 s, on this 2-core machine), and every test waits on conditions, not the clock.
# Four had grown to 186 s (1,862 tests), cores idle while all four waited. Six, and bytecode
# written (PYTHONDONTWRITEBYTECODE cleared; __pycache__ is git-ignored and never packaged), from
# a clean clone on the same loaded machine: 400 -> 282 s for the same CPU (316 -> 310 s). With
# bytecode off, each worker compiled and assert-rewrote every test module anew (7.6 s of CPU
# before its first test; 4.2 s from the cache, which tests/conftest.py writes before the
# workers start) and each loopdeck, MCP server or agent process a test starts compiled what it
# imports (subprocess-heavy files: 54.3 -> 51.3 s of CPU).
test: lint
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -n 6 --dist loadfile --durations=25

# Long property and stress runs (10,000 fuzzed replies; 20 runs racing on one store).
stress: $(STAMP)
	$(VENV)/bin/pytest -m slow -p no:cacheprovider

# The wheel as a user gets it: built, installed in a fresh venv, used from a temp folder.
package-check: $(STAMP)
	$(PY) .ci/package_check.py

BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

# Issue 11's targets as one PASS/FAIL table (targets.py), after the earlier benches' figures.
bench: $(BENCH_STAMP)
	cd bench && ../$(PY) console_quit.py && ../$(PY) fleet_lag.py && ../$(PY) steps_per_second.py && ../$(PY) pg_store.py && ../$(PY) acp_overhead.py && ../$(PY) fleet_console.py && ../$(PY) serve_first_frame.py && ../$(PY) otlp_exit.py && ../$(PY) log_chain.py && ../$(PY) targets.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
