"""The benchmark runner: runs at --quick sizes and writes the results schema. Never asserts timings."""

import json
from pathlib import Path

import pytest

from workbench.report import benchmark
from workbench.cli import main as cli_main
from workbench.core.errors import WorkbenchError

ROOT = Path(__file__).resolve().parents[1]
ROW_KEYS = {"key", "figure", "target", "unit", "runs", "median", "min", "max", "ratio", "ratio_unit", "goal",
            "goal_met", "status", "values", "detail", "note"}


def test_summarize_median_min_max_and_goal():
    fig = benchmark.summarize({"key": "k", "figure": "f", "target": "t", "unit": "x",
                               "values": [3.0, 1.0, 2.0, 5.0, 4.0], "goal": ">= 30"})
    assert (fig.runs, fig.median, fig.min, fig.max, fig.ratio) == (5, 3.0, 1.0, 5.0, 3.0)
    assert fig.goal_met is False
    # a required condition (identical A values) fails the figure even when the ratio meets the goal
    fig = benchmark.summarize({"key": "k", "figure": "f", "target": "t", "values": [40.0] * 5, "goal": ">= 30",
                               "requires": False})
    assert fig.goal_met is False
    # an explicit judged ratio (tokens/s judged against a bare forward) is kept apart from the median
    fig = benchmark.summarize({"key": "k", "figure": "f", "target": "t", "values": [100.0] * 5, "ratio": 0.5})
    assert (fig.median, fig.ratio, fig.goal_met) == (100.0, 0.5, None)


@pytest.mark.parametrize("raw, words", [
    ({"figure": "f", "target": "t", "values": [1.0]}, "no key 'key'"),
    ({"key": "k", "figure": "f", "target": "t", "values": []}, "non-empty list of numbers"),
    ({"key": "k", "figure": "f", "target": "t", "values": [1.0], "goal": "about 2"}, "'about 2'"),
])
def test_malformed_figure_is_a_one_line_error(raw, words):
    with pytest.raises(WorkbenchError, match=words) as e:
        benchmark.summarize(raw, source="bench/x.py measure()")
    assert "\n" not in str(e.value) and str(e.value).startswith("bench/x.py measure(): ")


def test_quick_run_writes_results_schema(smoke_demo, tmp_path, capsys):
    out = tmp_path / "results.json"
    rc = cli_main(["bench", "--quick", "--demo", str(smoke_demo), "--out", str(out),
                   "--only", "pipeline"])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == benchmark.SCHEMA
    for k in ("cpu", "cores", "torch", "transformers", "device", "dtype"):
        assert doc["machine"][k], k
    assert doc["machine"]["device"] == "cpu" and doc["machine"]["dtype"] == "fp32"
    rows = {r["key"]: r for r in doc["table"]}
    for r in doc["table"]:
        assert set(r) == ROW_KEYS
    tps = rows["pipeline_tokens_per_second"]
    assert tps["status"] == "ok" and tps["runs"] == len(tps["values"]) >= 5
    assert tps["min"] <= tps["median"] <= tps["max"] and tps["median"] > 0 and tps["ratio"] > 0
    assert tps["detail"]["tokens"] == sum(len(json.loads(ln)["input_ids"])
                                          for ln in (smoke_demo / "val.jsonl").read_text().splitlines())
    printed = capsys.readouterr().out
    assert doc["markdown"] in printed and "| tokens/s, whole pipeline" in printed


def _fake_package(tmp_path, monkeypatch, files: dict):
    """``bench.run`` looking for its benchmark modules in a package holding only ``files`` (name -> source)."""
    from bench import run

    package = f"fakebench_{abs(hash(str(tmp_path)))}"       # a fresh name: imported packages stay cached
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    for module, text in files.items():
        (tmp_path / package / f"{module}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(run, "PACKAGE", package)
    return run


def test_missing_or_measureless_benchmarks_are_not_run_rows(smoke_demo, tmp_path, monkeypatch, capsys):
    run = _fake_package(tmp_path, monkeypatch, {"rewire": "def main():\n    return 0\n"})  # no measure(),
    out = tmp_path / "r.json"                                                                  # no distributed
    assert run.main(["--quick", "--demo", str(smoke_demo), "--out", str(out), "--only", "distributed,rewire"]) == 0
    rows = {r["key"]: r for r in json.loads(out.read_text())["table"]}
    assert rows["distributed"]["status"] == "not run" and "does not exist" in rows["distributed"]["note"]
    assert rows["rewire"]["status"] == "not run" and "no measure()" in rows["rewire"]["note"]
    assert "| not run | bench/rewire.py has no measure()" in capsys.readouterr().out


def test_a_failing_benchmark_is_a_failed_row_and_exit_1(tmp_path, monkeypatch):
    run = _fake_package(tmp_path, monkeypatch,
                        {"capture": "def measure(*a, **k):\n    raise RuntimeError('memory child died')\n"})
    out = tmp_path / "r.json"
    assert run.main(["--quick", "--out", str(out), "--only", "capture", "--targets", "synthetic"]) == 1
    (row,) = json.loads(out.read_text())["table"]
    assert row["status"] == "failed" and "RuntimeError: memory child died" in row["note"]


def test_bench_is_a_package_run_without_file_paths_or_sys_path_edits():
    """`python -m bench.run --help` works from the checkout root; no bench script edits sys.path, and
    `workbench bench` imports the package instead of loading bench/run.py by its path."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "bench.run", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "--quick" in out.stdout, out.stderr
    for f in sorted((ROOT / "bench").glob("*.py")):
        text = f.read_text()
        assert "sys.path" not in text and "spec_from_file_location" not in text, f.name
    cli = (ROOT / "workbench" / "cli" / "bench.py").read_text()
    assert "from bench import run" in cli and "spec_from_file_location" not in cli


def test_bad_options_exit_2_with_one_line(tmp_path, capsys):
    assert cli_main(["bench", "--quick", "--only", "capture,gpu", "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --only 'capture,gpu'") and err.count("\n") == 1
    assert cli_main(["bench", "--quick", "--demo", str(tmp_path), "--out", str(tmp_path / "r.json")]) == 2
    assert "no demo manifest" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_bench_docstring_examples_run():
    import doctest

    from bench import acceptance, common, run, speed

    for mod in (acceptance, common, run, speed):
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0, mod.__name__


def test_the_speed_rows_come_from_the_last_sweep_and_say_when_there_is_none(tmp_path):
    from bench import speed

    (row,) = speed.last_figures(tmp_path / "none.json")
    assert row.status == "not run" and "--only speed" in row.note
    (tmp_path / "bad.json").write_text("{}")
    (row,) = speed.last_figures(tmp_path / "bad.json")
    assert row.status == "not run" and "no row with a prediction" in row.note
    state = {"settings": {"target": "data/demo-real/target", "rows": 4, "max_tokens": 48}, "rows": [
        {"draft": "d", "k": k, "predicted_error": e, "sign_right": None if k == 4 else k != 3, "measured_speedup": 0.9}
        for k, e in ((1, 0.02), (2, -0.15), (3, 0.05), (4, 0.01))]}          # K=4: a row too noisy to call a side
    (tmp_path / "s.json").write_text(json.dumps(state))
    err, sign, up = speed.last_figures(tmp_path / "s.json")
    assert (err.ratio, err.goal_met, err.target) == (0.15, False, "real vLLM, demo-real")
    assert round(sign.ratio, 3) == 0.667 and sign.goal_met is False and up.ratio == 0.9
    assert "of the 3 rows whose measurement calls a side" in sign.ratio_unit


def test_an_interrupted_run_keeps_the_sections_it_finished(tmp_path, monkeypatch):
    """Each finished section is in --out before the next one starts (a long real-model run stopped half-way
    keeps its capture rows); the file says whether the run completed."""
    row = ('[{"key": "k", "figure": "f", "target": "t", "unit": "x", "values": [1.0, 1.0, 1.0, 1.0, 1.0], '
           '"goal": None}]')
    out = tmp_path / "r.json"
    run = _fake_package(tmp_path, monkeypatch, {
        "capture": f"def measure(*a, **k):\n    return {row}\n",
        "acceptance": ("import json\n"
                       f"def measure(*a, **k):\n    doc = json.load(open({str(out)!r}))\n"
                       "    assert [r['key'] for r in doc['table']] == ['k'] and doc['settings']['complete'] is False\n"
                       "    raise KeyboardInterrupt\n")})
    with pytest.raises(KeyboardInterrupt):
        run.main(["--quick", "--out", str(out), "--only", "capture,acceptance", "--targets", "synthetic"])
    doc = json.loads(out.read_text())
    assert [r["key"] for r in doc["table"]] == ["k"] and doc["settings"]["complete"] is False
    assert run.main(["--quick", "--out", str(out), "--only", "capture", "--targets", "synthetic"]) == 0
    assert json.loads(out.read_text())["settings"]["complete"] is True


def test_the_exact_rows_are_the_targets_own_greedy_text_so_fast_and_exact_agree(smoke_demo):
    """bench.acceptance continues the longest prompts greedily to T (a foreign reference answer would make the
    exact loop, which follows its own greedy text, and the fast path score different tokens)."""
    import torch

    from bench.acceptance import fast_vs_exact, greedy_rows
    from workbench import rows as data
    from workbench.demo.build import read_manifest
    from workbench.model import capture, checkpoint

    target = capture.load_target(smoke_demo / "target")
    draft = checkpoint.load_draft(smoke_demo / "draft-aligned", target)
    (row,) = greedy_rows(target, [data.load(smoke_demo / "val.jsonl").rows()], 64, 1)
    assert len(row["input_ids"]) == 64 and sum(row["loss_mask"]) == 64 - row["n_prompt_tokens"]
    with torch.no_grad():
        logits = target.model(input_ids=torch.tensor([row["input_ids"]])).logits[0]
    assert logits[row["n_prompt_tokens"] - 1:-1].argmax(-1).tolist() == row["input_ids"][row["n_prompt_tokens"]:]
    out = fast_vs_exact(target, draft, [row], ",".join(read_manifest(smoke_demo)["taps"]["aligned"]), K=3)
    assert out["identical_A"] and out["verify_steps"] > 5 and out["T"] == 64
