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
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@mkdir -p $(VENV)/typecheck/strabo
	@ln -sfn $(CURDIR)/proxy $(VENV)/typecheck/strabo/proxy
	@touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/strabo demo

# Build the wheel and sdist, install each in a fresh venv, run every documented
# command from another directory (also run by .ci/run after the tests).
package-check: $(STAMP)
	$(BIN)/python scripts/check_package.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
