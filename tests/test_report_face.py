"""Issue 35: one face to call (``wb.diagnose(...)``), notebooks that import only from it in short cells, and the
answer block of a page."""

import ast
import re
from pathlib import Path

import jupytext
import pytest

from leftovers import leftovers

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.py"))


def test_the_face_names_no_subpackage_and_resolves_every_name():
    import workbench as wb

    packages = {p.name for p in (ROOT / "workbench").iterdir() if (p / "__init__.py").exists()}
    shadowed = [n for n in set(wb.FACE) & packages if wb.FACE[n] != f"workbench.{n}:"]
    assert not shadowed, f"a subpackage, once imported, would shadow these face names: {shadowed}"
    for name in wb.FACE:
        assert getattr(wb, name) is not None, name


def test_the_face_is_small_holds_no_module_and_no_stand_in_and_the_notebooks_use_it_only():
    """Issue 48: at most 12 names, none a module, none from workbench.testing; the notebooks reach at most 12
    distinct top-level ``wb.`` names, every one of them in the face."""
    import importlib
    import types

    import workbench as wb

    assert len(wb.FACE) <= 12, sorted(wb.FACE)
    # a face name points at a function or a class, never a whole module ("module:" in FACE); the old flat module path
    # workbench.diagnose, once imported, is a callable module (test_migration), so the object itself is not judged
    def target(name, where):
        module, _, attr = where.partition(":")
        return importlib.import_module(module).__dict__.get(attr or name)

    modules = [n for n, where in wb.FACE.items()
               if where.endswith(":") or isinstance(target(n, where), types.ModuleType)]
    assert modules == [], f"modules in the face: {modules}"
    assert not [n for n, where in wb.FACE.items() if "testing" in where], wb.FACE
    used = set()
    for path in NOTEBOOKS:
        used |= set(re.findall(r"\bwb\.([A-Za-z_]\w*)", path.read_text()))
    assert len(used) <= 12 and used <= set(wb.FACE), sorted(used)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_import_only_the_face_in_short_cells(path):
    nb = jupytext.read(path)
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        if "parameters" in cell.metadata.get("tags", []):
            continue
        lines = [x for x in cell.source.splitlines() if x.strip()]
        assert len(lines) <= 12, f"{path.name} code cell {i + 1}: {len(lines)} lines (at most 12)"
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench"):
                pytest.fail(f"{path.name} cell {i + 1}: from {node.module} import ... (use `import workbench as wb`)")
            if isinstance(node, ast.Import):
                bad = [a.name for a in node.names if a.name.startswith("workbench") and a.name != "workbench"]
                assert not bad, f"{path.name} cell {i + 1}: import {bad}"


def test_the_leftover_scanner_finds_what_a_reader_should_not_see():
    assert leftovers("Target(LlamaForCausalLM, path='x', N=4)") == ["a Python repr: Target(LlamaForCausalLM, path=",
                                                                     "a name='value' repr: path='x'"]
    # issue 58: what a colleague's reader cannot use
    assert leftovers("P(A>=i+1) [0.407, 0.229, 0.200]") == ["a list of numbers in prose: [0.407, 0.229, 0.200]"]
    assert leftovers("set the ids to [0, 2, 8]") == []                   # a list of ids is what the reader types
    assert leftovers("server: http://localhost:41873/v1") != [] and leftovers("e.g. http://127.0.0.1:30000") == []
    assert leftovers("… 13 more (see to_frame())") == ["a hint to run code: see to_frame()"]
    assert leftovers("verdict: match-other") == ["an internal code: match-other"]
    assert leftovers("recommended SGLang flags: none: no GPU cost model") != []
    assert leftovers("the SGLang server feeds L1,L3,L4; 16/16 requests identical") == []


def test_the_answer_block_names_the_fix_command_and_its_estimator():
    from workbench.analysis.answer import Answer, ids_command

    a = Answer("SGLang feeds `L1,L3,L4`.", "accept length 1.16 instead of 3.46 (decode path)", "rewire the draft",
               "workbench rewire --target t", "notebook 03")
    md = a.markdown()
    assert md.index("server feeds") < md.index("costs") < md.index("The fix") < md.index("evidence")
    assert "```bash\nworkbench rewire --target t\n```" in md and "`" not in a.text()
    cmd = ids_command("d/draft", "vllm", [0, 2, 4])
    assert 'c["eagle_aux_hidden_state_layer_ids"] = [0, 2, 4]' in cmd and "eagle_config" not in cmd
    assert re.search(r'setdefault\("eagle_config", \{\}\)\["eagle_aux', ids_command("d", "sglang", [1, 2, 3]))


def _fig():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 3), layout="constrained")
    return fig, fig.subplots()


def test_the_layout_check_catches_text_over_text_markers_over_labels_and_hidden_artists():
    from workbench.report.layout import layout_problems

    fig, ax = _fig()
    ax.bar([0, 1], [2.0, 3.0])
    ax.annotate("n=1856", (0, 2.0), ha="center", va="bottom")
    ax.annotate("n=1856", (0.02, 2.0), ha="center", va="bottom")
    assert any(p.startswith("text over text") for p in layout_problems(fig)), layout_problems(fig)

    fig, ax = _fig()
    ax.imshow([[0, 1], [1, 2]])
    ax.text(1, 1, "2.388", ha="center", va="center")
    ax.plot([1], [1], marker="*", markersize=16, color="red")
    assert any(p.startswith("marker over label") for p in layout_problems(fig)), layout_problems(fig)

    fig, ax = _fig()
    ax.bar([0], [2.0], yerr=[[0.5], [0.5]])
    ax.annotate("2.000", (0, 2.0), ha="center", va="bottom", xytext=(0, 3), textcoords="offset points")
    assert any("error bar" in p for p in layout_problems(fig)), layout_problems(fig)

    fig, ax = _fig()
    ax.plot([0, 1, 2], [1.1, 1.2, 1.1], "--", label="offline L1,L7,L12")
    ax.plot([0, 1, 2], [1.1, 1.2, 1.1], "k-", lw=2, label="live")
    assert any(p.startswith("hidden artist") for p in layout_problems(fig)), layout_problems(fig)

    fig, ax = _fig()
    ax.bar([0, 1], [3, 4], label="code")
    ax.bar([0, 1], [3, 4], label="prose")
    assert any(p.startswith("hidden artist") for p in layout_problems(fig)), layout_problems(fig)


def test_a_clean_figure_passes_the_new_checks():
    from workbench.report.layout import layout_problems

    fig, ax = _fig()
    ax.bar([0, 1], [2.0, 3.0], yerr=[0.2, 0.2])
    for x, v in ((0, 2.2), (1, 3.2)):
        ax.annotate(f"{v:.3f}", (x, v), ha="center", va="bottom", xytext=(0, 4), textcoords="offset points")
    ax.set_ylim(0, 4.5)
    assert layout_problems(fig) == []


def test_the_temperature_figure_puts_its_values_above_every_marker_and_error_bar():
    """Issue 35: the layout check found 03's temperature figure writing values on markers and error bars."""
    from types import SimpleNamespace

    from workbench.core.setting import Setting
    from workbench.report import plots
    from workbench.report.layout import layout_problems

    rows = [{"temperature": t, "decode-path accept length": v, "decode-path 95%": [lo, hi],
             "per-depth accept length": p, "per-depth 95%": [plo, phi]}
            for t, v, lo, hi, p, plo, phi in ((0.0, 3.458, 2.928, 4.157, 3.458, 2.928, 4.157),
                                              (0.3, 1.521, 1.364, 1.743, 1.526, 1.423, 1.667),
                                              (0.7, 1.119, 1.079, 1.173, 1.176, 1.138, 1.213),
                                              (1.0, 1.093, 1.047, 1.142, 1.120, 1.101, 1.141))]
    sweep = SimpleNamespace(rows=lambda: rows, per_depth=None, results={}, wiring="L1,L3,L4",
                            setting=Setting(steps=5, eagle_topk=4, num_draft_tokens=8))
    assert layout_problems(plots.accept_vs_temperature(sweep)) == []


def test_an_ids_fix_names_a_wiring_the_engine_can_be_given(smoke_demo):
    """On 8 rows at K=3 the diagnosis of the smoke draft finds L1,L2,L3 (which SGLang can feed) as good as the trained
    embed,L1,L3 (which it cannot): the answer's fix is those ids, with a command, not a crash on the trained taps
    (found in JupyterLab: run-all stopped on a TypeError in the answer)."""
    import workbench as wb

    d = Path(smoke_demo)
    run = wb.diagnose(d / "target", d / "draft-mismatched", d / "val.jsonl", engine="sglang", K=3, limit=8,
                      rewire=False)
    if run.diagnosis.fix != "ids":
        pytest.skip(f"the diagnosis chose {run.diagnosis.fix!r} on these weights")
    a = run.answer
    assert "feeds `L1,L2,L3`" in a.fix and "[1, 2, 3]" in a.command and "eagle_aux_hidden_state_layer_ids" in a.command


def test_a_name_that_left_the_face_still_answers_for_one_release_with_a_warning_naming_its_new_path():
    import workbench as wb

    with pytest.warns(FutureWarning, match=r"workbench\.evidence left the face.*use workbench\.report\.evidence"):
        evidence = wb.evidence
    from workbench.report import evidence as new

    assert evidence is new and "evidence" not in dir(wb) and "evidence" not in wb.FACE
    with pytest.warns(FutureWarning, match=r"use workbench\.engines\.records\.get"):
        assert wb.engine("sglang").name == "sglang"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        wb.nope
