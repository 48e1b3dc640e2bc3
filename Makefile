# The two set-up commands of the README:  `make demo`  and  `make test`.
# Each creates (or reuses) the local virtual environment .venv and installs what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test venv bench report clean-demo chromium hooks lab-settings

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

## The main job on the built-in demo: builds data/demo/ if needed, diagnoses both drafts, writes reports/.
demo: $(STAMP) hooks lab-settings
	$(VENV)/bin/workbench demo

## The import floors (import-linter, pyproject.toml), then the whole test suite (installs Debian's chromium for the
## report browser test when missing).
test: $(STAMP) chromium hooks lab-settings
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q --basetemp=.pytest-tmp

## Git strips notebook outputs at commit time: nbstripout as the clean filter that .gitattributes names for
## notebooks/*.ipynb (cell ids kept). Saved work stays in your file; git stages the stripped notebook.
hooks:
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
	  git config filter.nbstripout.clean '"$(abspath $(PY))" -m nbstripout --keep-id' && \
	  git config filter.nbstripout.smudge cat && \
	  git config diff.ipynb.textconv '"$(abspath $(PY))" -m nbstripout --keep-id -t'; \
	else echo "note: not a git checkout: no notebook output filter installed"; fi

## JupyterLab saves the widgets' state into the notebook (jupyter/workbench.json: the widget manager's saveState),
## so a saved notebook reopened shows its widgets instead of "Error displaying widget: model not found".
## Installed as a JupyterLab settings override of this environment (overrides.d: one file per package).
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d
lab-settings:
	@mkdir -p "$(LAB_OVERRIDES)" && cp jupyter/workbench.json "$(LAB_OVERRIDES)/workbench.json"

chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null); \
	  else echo "note: chromium missing and not root: the browser test will be skipped (sudo apt-get install chromium)"; fi; }

bench: $(STAMP)
	$(PY) -m bench.run

clean-demo:
	rm -rf data/demo reports
