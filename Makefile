# Two commands for a fresh machine with Python 3.10+ (3.11 tested):
#   make quickstart   set up .venv, install, run the main job
#   make test         set up .venv, install, run the test suite
PYTHON ?= python3
VENV ?= .venv
KT_DATA_DIR ?= $(abspath ../shared/data)
export KT_DATA_DIR

.PHONY: quickstart test setup clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	touch $@

setup: $(VENV)/.installed

quickstart: $(VENV)/.installed
	$(VENV)/bin/python pipelines/quickstart.py

test: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -q

clean:
	rm -rf $(VENV) runs
