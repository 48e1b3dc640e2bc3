"""Issue 57: the bench commands the docs cite rerun by their own command into an empty folder on the smoke demo,
and the docs' tables are their files rendered.

The speed sweeps and the load grid have theirs (tests/test_bench_speed.py, tests/test_vllm_load.py). Here:

- ``python -m bench.precision`` (``bench/precision-misreading.json``) and ``python -m bench.vllm``
  (``bench/vllm-time-to-know.json``), with loopback vLLM stand-ins in place of the real servers: the command's
  bookkeeping, rows and rendering, not the numbers (a stand-in decodes in float32, as the target does);
- ``python -m bench.foreign_quality --measure-only`` on a copy of the smoke demo whose "foreign" drafts are its own
  checkpoints (one given ModelOpt's default YaRN export): every draft measured, every pair's interval, the
  default export's cost.

The numbers are the real commands' (docs/bench.md names each command, what it needs and its time here).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import foreign_quality as fq
from bench import precision
from bench import reports
from bench import vllm as ttk
from workbench.testing.fake_vllm import Stand

ROOT = Path(__file__).resolve().parents[1]


def _block(doc: Path, begin: str, end: str) -> str:
    text = doc.read_text(encoding="utf-8")
    return text[text.index(begin) + len(begin):text.index(end)].strip()


def test_the_docs_precision_table_is_the_file():
    state = json.loads(precision.OUT.read_text())
    assert _block(precision.DOC, precision.BEGIN, precision.END) == precision.render(state).strip()


def test_the_docs_time_to_know_tables_are_the_file():
    figs = json.loads(ttk.OUT.read_text())
    assert _block(ttk.DOC, ttk.BEGIN, ttk.END) == ttk.render(figs).strip()


def test_the_docs_reports_table_is_the_files():
    state = {size: json.loads(f.read_text()) for size, f in reports.FILES.items()}
    assert _block(reports.DOC, reports.BEGIN, reports.END) == reports.render(state).strip()


def test_the_reports_benchmark_reruns_into_an_empty_folder(smoke_demo, tmp_path):
    """One page (01: the others are run by tests/test_notebooks*.py), cold then warm, into an empty file."""
    demo = tmp_path / "demo"
    shutil.copytree(smoke_demo, demo)
    out = tmp_path / "empty" / "reports.json"
    assert reports.main(["--demo", str(demo), "--size", "smoke", "--notebooks", "01", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["size"] == "smoke" and r["machine"]["cores"] >= 1
    for run in ("cold", "warm"):
        assert list(r[run]["pages"]) == ["01_dataset"] and r[run]["pages"]["01_dataset"]["status"] == "ok"
        assert r[run]["total"] >= r[run]["pages"]["01_dataset"]["seconds"] > 0
    assert "| 01 dataset |" in reports.render({"smoke": r})


def test_the_precision_benchmark_reruns_into_an_empty_folder(smoke_demo, tmp_path, monkeypatch, capsys):
    import workbench.live.vllm_server as vllm_server

    stand = Stand(smoke_demo)
    monkeypatch.setattr(vllm_server, "running_server", stand.running_server)
    out = tmp_path / "empty" / "precision.json"
    assert precision.main(["--demo", str(smoke_demo), "--requests", "8", "--subsets", "3", "--json", str(out)]) == 0
    state = json.loads(out.read_text())
    assert not stand.live and [(d, k) for _, d, k in stand.started] == [(smoke_demo / "draft-mismatched", 4)] * 2
    assert list(state["servers"]) == ["bfloat16", "float32"] and state["served"] == "L0,L2,L3"
    for s in state["servers"].values():
        assert s["judged"] == [0, 4] and s["fit"]["requests"] == [4, 8]        # never judged on what it fitted
        assert list(s["by_subset_size"]) == ["2", "4"]                          # the sizes 4 judged requests allow
        assert all(r["subsets"] == 3 for r in s["by_subset_size"].values())
        assert s["all"]["requests"] == 8 and s["all"]["evidence"]["tie_flips"] == 0   # float32 stand-ins: no flip
        assert s["all"]["wiring"] in (None, "L0,L2,L3")
    table = precision.render(state)
    assert table.count("\n| bfloat16 | ") == 2 and "| float32, all 8 | 8 |" in table
    assert table in capsys.readouterr().out                     # what the command printed is its file rendered


def test_the_time_to_know_benchmark_reruns_into_an_empty_folder(smoke_demo, tmp_path, monkeypatch):
    import workbench.live.vllm_server as vllm_server

    stand = Stand(smoke_demo)
    monkeypatch.setattr(vllm_server, "running_server", stand.running_server)
    monkeypatch.setattr(vllm_server, "find_python", lambda: None)        # no real vLLM is started
    out = tmp_path / "empty" / "ttk.json"
    assert ttk.main(["--demo", str(smoke_demo), "--limit", "3", "--candidates", "2", "--repeats", "1",
                     "--json", str(out)]) == 0
    figs = json.loads(out.read_text())
    assert [f["key"] for f in figs] == ["vllm_time_to_know_offline", "vllm_time_to_know_live",
                                        "vllm_time_to_know_live_serving"]
    d = figs[0]["detail"]
    assert len(d["offline_s"]) == 1 and d["served_as_exported"] == "L0,L2,L3"
    assert list(d["live"]) == d["candidates_offline"][:2] and len(stand.started) == 2 and not stand.live
    for spec, v in d["live"].items():                 # each server was given a draft naming that wiring's ids
        assert v["steps"] > 0 and v["accept_length"] >= 1
    assert "| `" + next(iter(d["live"])) + "`" in ttk.render(figs)


def test_the_trainer_comparison_reruns_into_an_empty_file(smoke_demo, tmp_path):
    root = tmp_path / "demo"
    root.mkdir()
    (root / "target").symlink_to(smoke_demo / "target")
    (root / "train.jsonl").write_text((smoke_demo / "train.jsonl").read_text())
    (root / "val.jsonl").write_text("\n".join((smoke_demo / "val.jsonl").read_text().splitlines()[:6]) + "\n")
    for name, folder in fq.FOLDERS.items():
        dest = (root / "foreign-quality.work" / name / "draft-aligned") if folder is None else root / folder
        shutil.copytree(smoke_demo / ("draft-mismatched" if name == "speculators" else "draft-aligned"), dest)
    cfg = json.loads((root / "draft-modelopt" / "config.json").read_text())       # ModelOpt's default export
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 128}
    (root / "draft-modelopt" / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "empty" / "fq.json"
    assert fq.main(["--root", str(root), "--measure-only", "--taps", "L1,L3,L4", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert list(doc["accept"]) == list(fq.FOLDERS) and doc["taps"] == "L1,L3,L4"
    assert [(d["a"], d["b"]) for d in doc["differences"]] == fq.PAIRS
    assert doc["differences"][1]["difference"] == 0.0          # ours and modelopt-norope: the same weights here
    assert doc["accept"]["modelopt"]["rope_scaling"]["rope_type"] == "yarn"
    assert set(doc["modelopt_default_rope_cost"]) == {"trained_taps", "as_vllm_feeds"}
    assert all(a["rows"] == 6 for a in doc["accept"].values())
    assert "`modelopt` (default YaRN export)" in fq.tables_md(doc)


@pytest.mark.parametrize("bad", ["L1,L99,L4", "x"])
def test_the_trainer_comparison_refuses_taps_the_target_lacks_in_one_line(smoke_demo, tmp_path, bad, capsys):
    assert fq.main(["--root", str(smoke_demo), "--measure-only", "--taps", bad, "--json", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "--taps" in err


def test_the_demo_story_benchmark_reruns_into_an_empty_file(built_smoke_demo, tmp_path, capsys):
    """``python -m bench.demo_story --size smoke --seeds 0`` into an empty file; the seed's build is the session's
    (a finished build is reused, as the command's resume does), so the summary is read from a real build."""
    from bench import demo_story

    work = tmp_path / "work"
    shutil.copytree(built_smoke_demo, work / "smoke-0")
    before = (work / "smoke-0" / "manifest.json").stat().st_mtime_ns
    out = tmp_path / "empty" / "story.json"
    assert demo_story.main(["--size", "smoke", "--seeds", "0", "--work", str(work), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    run = doc["runs"]["smoke"]
    assert list(doc["runs"]) == ["smoke"] and run["seeds"] == [0] and [r["seed"] for r in run["rows"]] == [0]
    assert [f["key"] for f in run["figures"]] == [f.key for f in demo_story.last_figures(out)]
    assert (work / "smoke-0" / "manifest.json").stat().st_mtime_ns == before          # reused, not rebuilt
    assert "| 0 | " in capsys.readouterr().out


def test_the_docs_trainer_comparison_is_the_file():
    doc = json.loads(fq.OUT.read_text())
    assert _block(fq.DOC, fq.BEGIN, fq.END) == fq.tables_md(doc).strip()
