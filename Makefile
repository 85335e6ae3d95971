# Two commands for a fresh machine with Python 3.10+ (3.11 tested):
#   make quickstart   set up .venv, install the package alone, run the quickstart
#   make test         set up .venv, install, run the test suite
#   make test-fast    the suite less its slow tests, for local loops
#   make docs         build the documentation site into site/ (mkdocs.yml)
PYTHON ?= python3
VENV ?= .venv
KT_DATA_DIR ?= $(abspath ../shared/data)
export KT_DATA_DIR

.PHONY: quickstart test test-fast lint setup docs clean

# The package alone: what the quickstart runs (TensorFlow, Keras, SentencePiece, sacreBLEU).
$(VENV)/.package-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e .
	touch $@

# With the test extra (JAX, PyTorch, tensorflow-datasets, ruff): what `make test` needs.
$(VENV)/.installed: $(VENV)/.package-installed pyproject.toml
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	touch $@

setup: $(VENV)/.installed

quickstart: $(VENV)/.package-installed
	$(VENV)/bin/python pipelines/quickstart.py

# Two pytest workers, one per core of the 2-core CI machine (much of a test's time is
# single-threaded tracing); --dist loadfile keeps each file's module fixtures in one worker
# (the documented pages go one by one: tests/_xdist_scheduling.py). The 30 slowest tests are
# listed at the end.
test: $(VENV)/.installed lint
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadfile --durations=30

# For local loops: the suite less the tests marked slow (tests/conftest.py lists them: whole
# pipelines, kill-and-resume runs, documented pages, benchmarks on trained models). CI runs
# everything (`make test`).
test-fast: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadfile -m "not slow"

# ruff's settings are in pyproject.toml; `ruff format .` and `ruff check --fix .` mend most findings.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The documentation site (mkdocs.yml) into site/; its packages are the `docs` extra, which
# `make test` does not need.
$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(VENV)/bin/python -m pip install --quiet -e ".[docs]"
	touch $@

docs: $(VENV)/.docs-installed
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) runs site
