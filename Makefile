# agentledger — `make demo` and `make test` do all set-up themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test bench clean

# Create the virtualenv and install the project with its test extras. On a
# fresh Debian, `python3 -m venv` needs the python3-venv package: install it
# when we can (root with apt-get), otherwise say what is missing.
$(STAMP): pyproject.toml
	@if ! $(PYTHON) -m venv --help >/dev/null 2>&1 || ! $(PYTHON) -c 'import ensurepip' >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq python3-venv git >/dev/null; \
	  else echo "make: need python3-venv and git (apt-get install python3-venv git)" >&2; exit 1; fi; fi
	@command -v git >/dev/null || { echo "make: git is required" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,ui,central]'
	@# bytecode now, as a wheel install has it: with PYTHONDONTWRITEBYTECODE set, every
	@# command would otherwise compile every module again (~80 ms on the close-task hook)
	$(BIN)/python -m compileall -q daemon/agentledger >/dev/null
	@touch $(STAMP)

# The report test renders HTML in headless Chromium (Debian's package). Installed
# when we can (root with apt-get); otherwise that test is skipped (failed under CI=true).
CHROMIUM_STAMP := $(VENV)/.chromium-stamp
$(CHROMIUM_STAMP): $(STAMP)
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "make: installing Debian's chromium for the report test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "make: chromium not installed; the report test will be skipped (apt-get install chromium)" >&2; fi; fi
	@touch $(CHROMIUM_STAMP)

# The team-ledger tests start a throwaway PostgreSQL 15 cluster from Debian's server
# binaries; installed the same way when missing (the tests fail under CI=true without them).
PG_STAMP := $(VENV)/.postgresql-stamp
$(PG_STAMP): $(STAMP)
	@if [ ! -x /usr/lib/postgresql/15/bin/initdb ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "make: installing Debian's postgresql-15 for the team-ledger tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null; \
	  else echo "make: PostgreSQL 15 not installed; the team-ledger tests will be skipped (apt-get install postgresql-15)" >&2; fi; fi
	@touch $(PG_STAMP)

install: $(STAMP)

# Generate an example (iteration log, git repository, transcript, vally run), start
# the service on it, close iterations while it watches, query, bump the rubric, stop.
demo: $(STAMP)
	$(BIN)/python -m agentledger.example.demo --out demo-out

test: $(STAMP) $(CHROMIUM_STAMP) $(PG_STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/bench_iterlog.py

clean:
	rm -rf $(VENV) demo-out .pytest_cache .hypothesis
