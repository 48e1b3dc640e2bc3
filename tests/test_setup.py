"""The project's own set-up files agree with each other (what a fresh machine and CI rely on)."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower()


def test_environment_yml_names_the_same_direct_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]} | {_name(r) for r in project["optional-dependencies"]["test"]}
    text = (ROOT / "environment.yml").read_text()
    assert "conda-forge" in text and re.search(r"^\s*-\s*pip\s*$", text, re.M), "conda-forge channel and explicit pip"
    pip_block = text.split("- pip:", 1)[1]
    listed = {_name(line.strip()[2:]) for line in pip_block.splitlines() if line.strip().startswith("- ")}
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject: {wanted - listed}"


def test_torch_is_pinned_to_the_cpu_build_everywhere_it_is_installed():
    assert "torch==2.13.0" in (ROOT / "Makefile").read_text()
    assert "torch==2.13.0" in (ROOT / "environment.yml").read_text()


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    setup = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", setup, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    assert commands == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\b", ci, re.M), ".ci/run must call the README's test command"
    assert "set -e" in ci


def test_console_script_is_installed_and_lists_every_command():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for cmd in ("inspect", "wiring", "accept", "diagnose", "demo", "report", "sglang"):
        assert cmd in out.stdout


def _links(path: Path) -> list[str]:
    """The relative targets of the markdown links ``[text](target)`` in ``path`` (no URLs, no #anchors)."""
    found = re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", path.read_text())
    return [t.split("#")[0] for t in found if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_docs_link_resolves_and_every_command_has_a_linked_page():
    """The README links its reference pages in docs/; each link (and each link inside docs/) names a file,
    and every command but `demo` (the README's own story) has a page the README links."""
    readme = ROOT / "README.md"
    linked = [t for t in _links(readme) if t.startswith("docs/")]
    assert linked, "the README links no docs/ page"
    for page in [readme, *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in _links(page):
            assert (page.parent / target).is_file(), f"{page.relative_to(ROOT)}: link {target!r} names no file"
    commands = {p.stem for p in (ROOT / "workbench" / "cli").glob("*.py") if not p.stem.startswith("_")} - {"demo"}
    import importlib

    def page_names(stem):          # the module's stem, or the command name it registers (foreign → foreign-drafts)
        name = getattr(importlib.import_module(f"workbench.cli.{stem}"), "NAME", stem)
        return {f"docs/{stem}.md", f"docs/{name}.md"}

    missing = {c for c in commands if not page_names(c) & set(linked)}
    assert not missing, f"commands without a docs page linked from the README: {sorted(missing)}"
