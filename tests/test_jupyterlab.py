"""Drive JupyterLab itself in headless Chromium (issue 22): JupyterLab started at a project root holding the
committed notebook 03 and the smoke demo as ``data/demo``; open notebook 03, run all cells, change the
explorer's wiring and K and check the figure changes; save, shut the kernel down, reload: the widgets come
back from the widget state saved in the notebook (``jupyter/workbench.json``, the JupyterLab setting that
``make`` installs), never "Error displaying widget: model not found".

The notebook is the committed one with the smoke demo's parameters set in its parameters cell (what papermill
injects in a report run); ``demo`` keeps its default, the relative ``data/demo``, and the kernel runs in
``notebooks/``: the rewire must still run there (issue 29), as it does in the report. The test reuses the Chromium set-up of ``test_browser.py``.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from test_browser import ARGS, CHROMIUM, broken_words

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ROOT / "jupyter" / "workbench.json"
# SGLang: its fix for the smoke draft is a rewire (vLLM's, the default engine, is one config line), so the page must
# find the demo's training data from a kernel in notebooks/ (issue 29)
PARAMS = {"size": '"smoke"', "steps": "3", "limit": "0", "rewire_limit": "16", "engine": '"sglang"'}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists() and not shutil.which("chromium"),
                       reason="Debian chromium not installed (make test installs it: apt-get install -y chromium)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _project(tmp_path: Path, demo: Path) -> Path:
    """A project root as a user has it after `make demo`: pyproject.toml, notebooks/, data/demo."""
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'lab-test'\n")
    (project / "data" / "demo").symlink_to(Path(demo).resolve(), target_is_directory=True)
    nb = nbformat.read(str(ROOT / "notebooks" / "03_acceptance.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    lines = cell.source.splitlines()
    for name, value in PARAMS.items():
        i = next(i for i, line in enumerate(lines) if line.split("=")[0].strip() == name)
        lines[i] = f"{name} = {value}"
    cell.source = "\n".join(lines)
    nbformat.write(nb, str(project / "notebooks" / "03_acceptance.ipynb"))
    return project


def _start_lab(project: Path, tmp_path: Path):
    port = _free_port()
    settings = tmp_path / "lab-settings"
    (settings / "overrides.d").mkdir(parents=True)
    shutil.copy(SETTINGS, settings / "overrides.d" / "workbench.json")    # what `make` installs into the venv
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               JUPYTER_CONFIG_DIR=str(tmp_path / "jcfg"), JUPYTER_RUNTIME_DIR=str(tmp_path / "jrt"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "jws"), OMP_NUM_THREADS="1")
    env.pop("WORKBENCH_REPORT", None)
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                             f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--IdentityProvider.token=",
                             "--ServerApp.password=", f"--ServerApp.root_dir={project}",
                             "--LabApp.expose_app_in_browser=True", f"--LabApp.app_settings_dir={settings}",
                             f"--LabApp.workspaces_dir={tmp_path / 'jws'}"]
                            + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
                            cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"JupyterLab exited: {(tmp_path / 'lab.log').read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise AssertionError(f"JupyterLab did not answer in 60 s: {(tmp_path / 'lab.log').read_text()[-3000:]}")


KERNEL_IDLE = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && w.content && w.content.widgets.length > 0; }"""
ALL_RUN = """() => { const w = window.jupyterapp.shell.currentWidget;
  const k = w.sessionContext.session.kernel;
  return k.status === 'idle' && w.content.widgets.every(c => c.model.type !== 'code' || c.model.executionCount); }"""
ERRORS = """() => window.jupyterapp.shell.currentWidget.content.widgets.filter(c => c.model.type === 'code')
  .flatMap(c => c.model.outputs.toJSON()).filter(o => o.output_type === 'error')
  .map(o => o.ename + ': ' + o.evalue)"""
OUTPUT_TEXT = """() => window.jupyterapp.shell.currentWidget.content.widgets.filter(c => c.model.type === 'code')
  .flatMap(c => c.model.outputs.toJSON()).map(o => [].concat(o.text || (o.data && o.data['text/plain']) || '')
  .join('')).join('\\n')"""
EXPLORER = ".jp-OutputArea-output .widget-vbox:has(.widget-dropdown)"


def _explorer_image(page) -> str:
    return page.locator(f"{EXPLORER} img.widget-image").first.get_attribute("src")


def _wait_image_change(page, before: str, what: str) -> str:
    deadline = time.time() + 30
    while time.time() < deadline:
        src = _explorer_image(page)
        if src and src != before:
            return src
        time.sleep(0.25)
    raise AssertionError(f"the explorer's figure did not change after {what}")


def _wait_text(locator, text: str, what: str) -> None:
    deadline = time.time() + 30
    while text not in locator.inner_text():
        if time.time() > deadline:
            raise AssertionError(f"{what}: {text!r} never appeared in {locator.inner_text()[-500:]!r}")
        time.sleep(0.25)


def test_notebook_03_runs_in_jupyterlab_and_the_explorer_reacts(tmp_path, smoke_demo):
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    project = _project(tmp_path, Path(smoke_demo))
    proc, url = _start_lab(project, tmp_path)
    exe = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.set_default_timeout(60_000)
                page.goto(f"{url}/lab/tree/notebooks/03_acceptance.ipynb")
                page.wait_for_function(KERNEL_IDLE, timeout=90_000)
                page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
                # a loaded 2-core machine ran report 03 in 400 s (issue 35's runs): room for that here
                page.wait_for_function(ALL_RUN, timeout=600_000, polling=1000)
                assert page.evaluate(ERRORS) == []
                # issue 29: `demo` stays "data/demo" (relative) while the kernel runs in notebooks/ and fill_paths
                # makes `target` absolute: the rewire still finds the demo's training data and runs, as in a report
                text = page.evaluate(OUTPUT_TEXT)
                assert "set train_data" not in text and re.search(r"recovered \d+(\.\d+)?%", text), text[-3000:]
                assert "tree tree" not in text
                # a rendered table: no word or number broken inside a cell (each cell's DOM text)
                tables = page.locator(".jp-OutputArea-output .wb-table")
                assert tables.count() >= 2
                for width in (1400, 1200, 800):                 # issue 35: the widths the report tests use
                    page.set_viewport_size({"width": width, "height": 1000})
                    for i in range(tables.count()):
                        tables.nth(i).scroll_into_view_if_needed()
                        cells = ".jp-OutputArea-output .wb-table td, .jp-OutputArea-output .wb-table th"
                        assert broken_words(page, cells) == [], f"{width} px, table {i}"
                page.set_viewport_size({"width": 1400, "height": 1000})

                # the explorer: change the wiring, then K; the figure (and its title) follow
                explorer = page.locator(EXPLORER).first
                explorer.scroll_into_view_if_needed()
                page.locator(f"{EXPLORER} img.widget-image").first.wait_for()
                select = explorer.locator(".widget-dropdown select")
                options = select.evaluate("s => Array.from(s.options).map(o => o.textContent.trim())")
                current = select.evaluate("s => s.options[s.selectedIndex].textContent.trim()")
                assert len(options) >= 2, options
                first = _explorer_image(page)
                other = next(o for o in options if o != current)
                select.select_option(label=other)
                second = _wait_image_change(page, first, f"choosing wiring {other}")
                _wait_text(explorer, f"wiring {other}", "the coloured tokens' title follows the wiring")
                handle = explorer.locator(".widget-hslider:has(label:text-is('K')) .noUi-handle").first
                readout = explorer.locator(".widget-hslider:has(label:text-is('K')) .widget-readout").first
                k0 = int(readout.inner_text())
                handle.focus()
                handle.press("ArrowLeft")
                _wait_image_change(page, second, "moving K")
                k1 = int(readout.inner_text())
                assert k1 == k0 - 1
                _wait_text(explorer, f"K={k1}", "the coloured tokens' title follows K")
                page.screenshot(path=str(tmp_path / "explorer.png"), full_page=False)

                # save, shut the kernel down, reopen: the widgets come back from the saved state
                page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
                nb_path = project / "notebooks" / "03_acceptance.ipynb"
                deadline = time.time() + 30
                while time.time() < deadline:
                    meta = json.loads(nb_path.read_text()).get("metadata", {})
                    if "application/vnd.jupyter.widget-state+json" in meta.get("widgets", {}):
                        break
                    time.sleep(0.5)
                assert "application/vnd.jupyter.widget-state+json" in meta.get("widgets", {}), \
                    "JupyterLab saved no widget state into the notebook"
                page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
                page.reload()
                page.wait_for_function(KERNEL_IDLE, timeout=90_000)
                page.locator(EXPLORER).first.wait_for(timeout=30_000)
                assert "model not found" not in page.locator(".jp-Notebook").inner_text()
            finally:
                browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_installs_the_widget_state_setting_into_the_environment(tmp_path):
    subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-C", str(ROOT), "lab-settings",
                    f"VENV={tmp_path / 'venv'}"], check=True, capture_output=True)
    installed = tmp_path / "venv" / "share" / "jupyter" / "lab" / "settings" / "overrides.d" / "workbench.json"
    assert json.loads(installed.read_text()) == {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}
