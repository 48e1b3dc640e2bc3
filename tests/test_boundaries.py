"""The module boundaries: no private name crosses a module, and the light commands stay light.

A private name (``_x``) is one module's business: another module neither imports it nor reaches it
through an attribute (``other._x``), so every room can be changed without reading the others.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "workbench"
MODULES = sorted(PKG.rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_here(tree) -> set[str]:
    """Private names this module defines itself (functions, classes, attributes, variables)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)            # dataclass fields set by keyword, e.g. Context(_group=...)
    return {n for n in out if _private(n)}


def private_crossings(path: Path) -> list[str]:
    """``file:line: name`` for every private name of another workbench module used in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _defined_here(tree)
    workbench_aliases = set()                    # local names bound to workbench modules
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench"):
            for a in node.names:
                if _private(a.name):
                    out.append(f"{path.name}:{node.lineno}: from {node.module} import {a.name}")
                elif node.module == "workbench":
                    workbench_aliases.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("workbench"):
                    workbench_aliases.add(a.asname or a.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            base = node.value
            while isinstance(base, ast.Attribute) and not (isinstance(base.value, ast.Name)
                                                           and base.value.id in workbench_aliases):
                base = base.value                  # torch.ops.aten._x: judge the chain by its root name
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Name) and base.id not in workbench_aliases and base.id not in _LOCAL_OBJECTS:
                continue                           # a third-party object's private (torch._C ...): not ours
            out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


# names that hold workbench objects in the modules (results, drafts, targets): their privates are not public
_LOCAL_OBJECTS = {"draft", "d", "target", "tgt", "res", "r", "result", "dx", "ctx", "batch", "cmp", "spec"}


def test_no_private_name_crosses_a_module_boundary():
    found = [hit for p in MODULES for hit in private_crossings(p)]
    assert not found, "private names used outside their module:\n" + "\n".join(found)


def test_the_checker_sees_a_crossing(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("from workbench.simulate.acceptance import _x\nfrom workbench import draft\n"
                 "def f(res):\n    return draft._unroll, res._s(), torch._C\n")
    hits = private_crossings(p)
    assert len(hits) == 3 and "_x" in hits[0] and "draft._unroll" in hits[1] and "res._s" in hits[2]


@pytest.mark.parametrize("argv", [["--help"], ["wiring", "--help"]])
def test_help_and_wiring_do_not_import_torch(argv, tmp_path):
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 8}')
    code = ("import sys\nfrom workbench.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            f"main(['wiring', '--target', {str(tmp_path)!r}])\n"
            "print('TORCH' if 'torch' in sys.modules else 'LIGHT')\n")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("LIGHT")


# ─────────────────────────────── the floors ───────────────────────────────

def workbench_imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported workbench module, line, at module level?) for every import in ``path``, at every depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = set()
    for node in tree.body:                    # module level: the body and its if/try blocks (TYPE_CHECKING, ...)
        for n in (ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]):
            top.add(id(n))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("workbench"):
            for a in node.names:
                out.append((f"{node.module}.{a.name}", node.lineno, id(node) in top))
                out.append((node.module, node.lineno, id(node) in top))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("workbench"):
                    out.append((a.name, node.lineno, id(node) in top))
    return out


def _module_name(p: Path) -> str:
    name = ".".join(p.relative_to(PKG.parent).with_suffix("").parts)
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def import_graph() -> dict[str, set[str]]:
    """workbench module -> the workbench modules it imports, counting imports at every depth."""
    names = {_module_name(p): p for p in MODULES}
    graph = {}
    for name, p in names.items():
        graph[name] = {m for m, _, _ in workbench_imports(p) if m in names and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop of ``graph`` (a list of modules, first == last), or None."""
    state, stack = {}, []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = 2
        stack.pop()
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_import_graph_has_no_loop_at_any_depth():
    graph = import_graph()
    graph.pop("workbench", None)                  # the root only installs the old-path finder (core.compat)
    graph.pop("workbench.__main__", None)
    loop = find_cycle(graph)
    assert loop is None, "import loop: " + " -> ".join(loop)


def test_the_loop_finder_finds_a_loop():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_a_lazy_workbench_import_appears_only_in_the_cli():
    """Inside a function, an import hides a dependency from the reader (and once hid a 12-module loop);
    only the CLI imports lazily, so that ``--help`` and the light commands never load torch."""
    found = [f"{p.relative_to(PKG.parent)}:{line}: {m}" for p in MODULES if "cli" not in p.relative_to(PKG).parts
             for m, line, top in workbench_imports(p) if not top]
    assert not found, "function-level workbench imports outside workbench/cli:\n" + "\n".join(sorted(set(found)))


def test_no_module_passes_800_lines():
    long = {str(p.relative_to(PKG.parent)): n for p in MODULES if (n := len(p.read_text().splitlines())) > 800}
    assert not long, f"split these along their ideas: {long}"


def test_lint_imports_keeps_the_floors():
    """The floors of pyproject.toml ([tool.importlinter]): `lint-imports` (also run by `make test`)."""
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    out = subprocess.run([str(exe), "--no-cache"], capture_output=True, text=True, cwd=PKG.parent)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_every_docstring_example_runs():
    """Every module opens with a runnable example (baukit's habit): all of them run, in every package."""
    import doctest
    import importlib

    failed = {}
    for p in MODULES:
        name = _module_name(p)
        if name.endswith("__main__"):
            continue
        res = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS, verbose=False,
                              report=False)
        if res.failed:
            failed[name] = res.failed
    assert not failed, f"doctest failures (python -m doctest -v on the module shows them): {failed}"


def test_nothing_in_the_project_imports_an_old_flat_path():
    """The old paths are for users' notebooks, for one release (docs/migration.md); our own code, tests,
    benchmarks and notebooks import the packages."""
    from workbench.core.compat import OLD_PATHS

    root = PKG.parent
    files = [*root.joinpath("workbench").rglob("*.py"), *root.joinpath("tests").rglob("*.py"),
             *root.joinpath("bench").rglob("*.py"), *root.joinpath("notebooks").glob("*.py")]
    found = []
    for p in files:
        if p.name == "test_migration.py" or p.parts[-2:] == ("core", "compat.py"):
            continue
        for m, line, _ in workbench_imports(p):
            parts = m.split(".")
            if len(parts) > 1 and parts[0] == "workbench" and parts[1] in OLD_PATHS and not (PKG / parts[1]).is_dir():
                found.append(f"{p.relative_to(root)}:{line}: {m}")
    assert not found, "old import paths:\n" + "\n".join(sorted(set(found)))


def test_the_target_is_loaded_by_the_one_loader_only():
    """Issue 48: ``capture.load_target`` is called only by ``load.inputs.target`` (the one loader); the demo builders,
    ``vllm taps`` and the CLI go through it."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "workbench"
    calls = [f"{p.relative_to(root.parent)}:{i}" for p in sorted(root.rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bload_target\(", line) and not line.lstrip().startswith((">>>", "def ", "#"))
             and p.name != "capture.py"]
    assert len(calls) == 1 and calls[0].startswith("workbench/load/inputs.py:"), calls
