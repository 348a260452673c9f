# The two commands of the README: `make test` and `make demo`.
# Both create .venv on first use and install strabo into it, so a fresh
# machine needs nothing but Python 3.11 and pip.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo lint install clean package-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	@echo "Installing strabo and its dependencies into $(VENV) (first run only: a minute or two)..."
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --progress-bar off --disable-pip-version-check -e '.[dev]'
	@echo "Installed into $(VENV)."
	@mkdir -p $(VENV)/typecheck/strabo
	@ln -sfn $(CURDIR)/proxy $(VENV)/typecheck/strabo/proxy
	@touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The tests run in parallel (pytest-xdist), in TEST_WORKERS processes: many of
# them wait on sockets, servers and processes, so more workers than cores keep
# the cores busy (on 2 cores, 2 or 3 workers left them idle more often, 6 cost
# more CPU for nothing: 4). worksteal: a worker that runs out of tests takes
# some from another's queue, so a slow test at the end of one queue does not
# hold the whole run. `make test TEST_WORKERS=0` runs them in one process.
# ruff and mypy run first, one after the other: with their caches they take a
# second or two, and a lint or type error stops the run before the tests.
TEST_WORKERS ?= 4

# PYTHONDONTWRITEBYTECODE (set by some shells and containers) is cleared for the
# tests: with it, every test module edited since its last .pyc is rewritten by
# pytest and compiled again in each worker's collection, run after run (4 to 6 s
# of CPU per worker after a day of edits), and every edited module again in each
# process the tests start. The .pyc files go to __pycache__, which git ignores.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

demo: $(STAMP)
	$(BIN)/strabo demo

# Build the wheel and sdist, install each in a fresh venv, run every documented
# command from another directory (also run by .ci/run after the tests).
package-check: $(STAMP)
	$(BIN)/python scripts/check_package.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
