# The two set-up commands of the README:  `make demo`  and  `make test`.
# Each creates (or reuses) the local virtual environment .venv and installs what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test venv bench report clean-demo

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

## The main job on the built-in demo: builds data/demo/ if needed, diagnoses both drafts, writes reports/.
demo: $(STAMP)
	$(VENV)/bin/workbench demo

## The whole test suite.
test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/run.py

clean-demo:
	rm -rf data/demo reports
