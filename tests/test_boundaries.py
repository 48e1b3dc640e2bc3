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
    p.write_text("from workbench.acceptance import _x\nfrom workbench import draft\n"
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
