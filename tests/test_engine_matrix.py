"""Issue 55: every vLLM release in the engine matrix, replayed without a server.

``bench/engine-matrix.json`` (``python -m bench.engine_matrix`` on the releases of ``make vllm-versions``) holds, per
release and draft-config shape, what the real server fed; ``tests/data/recordings/engine-matrix/<release>/<cell>.json``
holds every exchange it had with the client. Here each recorded cell is replayed through ``vllm_live.compare``
(:class:`workbench.live.recorded.Replay`), told nothing of the release: it reads the release off the recorded
``/version``, picks that release's record from the release table, and must name, as what the server fed, exactly the
taps that record predicts from the draft config alone. A record changed without matching evidence fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.engines import releases
from workbench.engines.records import RECORDS
from workbench.engines.tables import table

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]
MATRIX = json.loads((ROOT / "bench" / "engine-matrix.json").read_text())
CELLS = [r for r in MATRIX["cells"] if r.get("recording")]


def _ids(row):
    return f"{row['release']}-{row['cell']}"


@pytest.fixture(scope="module")
def target():
    from workbench.live.samples import local_inputs

    return local_inputs(ROOT / MATRIX["target"], ROOT / "tests/data/smoke-demo/draft-mismatched",
                        ROOT / "tests/data/smoke-demo/val.jsonl", progress=False)[0]


@pytest.mark.parametrize("row", CELLS, ids=_ids)
def test_each_release_serves_what_its_record_predicts(row, target, tmp_path):
    """Replayed, told nothing of the release: the record read off /version predicts what the server fed."""
    from bench.engine_matrix import CELLS as SHAPES
    from bench.engine_matrix import make_draft, rows_file

    from workbench.live.recorded import Replay, load
    from workbench.live.vllm_live import compare

    rec = load(ROOT / row["recording"])
    version = rec["recorded"]["vllm"]
    assert version == row["release"], "the recording is of another release"
    draft = make_draft(row["cell"], tmp_path)
    cfg = json.loads((draft / "config.json").read_text())
    assert cfg == rec["served"]["draft_config"], "the cell's draft config changed since it was recorded: re-run the matrix"
    predicted = releases.predict(version, cfg, ROOT / MATRIX["target"])
    source = SHAPES[row["cell"]][1]
    spec = rec["served"]["speculative_config"]
    # the matrix searched all 84 wirings live; here the record's prediction, the served wiring and the runners-up
    # (with every record's reading, which compare adds itself) keep the replay to seconds
    wirings = list(dict.fromkeys([predicted["taps"], row["served"]] + [t["wiring"] for t in row["top"]]))
    c = compare(rec["url"], ROOT / MATRIX["target"], draft, rows_file(tmp_path, rec.get("reply_tokens")),
                limit=rec["rows"], K=spec[
                    "num_speculative_tokens"], client=Replay.of(rec), wirings=wirings, served_dtype="float32",
                probe=0, progress=False,
                drafting=("parallel" if spec.get("parallel_drafting") else "sequential") if source == "peagle" else None)
    assert c.settings["engine_record"] == predicted["record"], c.notes[:2]
    assert predicted["feasible"], predicted
    assert c.matched == predicted["taps"], (f"{row['release']} {row['cell']}: the server fed {c.matched}, record "
                                            f"{predicted['record']} predicts {predicted['taps']}\n{c.summary()}")
    assert c.matched == row["served"], "the matrix file says otherwise: re-run python -m bench.engine_matrix"


def test_the_matrix_serves_every_boundary_on_both_sides():
    """Each boundary between two records that a CPU release can serve is served on both sides (the last release before
    it and the first after it), and the newest release is served; every cell of a served release agrees."""
    served = {r["release"] for r in MATRIX["cells"] if r.get("starts")}
    rows = table("vllm")["releases"]
    cpu = [r for r in rows if r["features"].get("serves_eagle3_on_cpu")]
    for lo, hi in zip(cpu, cpu[1:]):
        if lo["record"] == hi["record"]:
            continue
        assert any(releases.in_range(v, lo["versions"]) for v in served), f"nothing served in {lo['versions']}"
        assert any(releases.in_range(v, hi["versions"]) for v in served), f"nothing served in {hi['versions']}"
    newest = max(served, key=releases.parse_version)
    assert releases.parse_version(newest)[:2] == releases.parse_version(table("vllm")["checked_up_to"])[:2]
    bad = [(r["release"], r["cell"], r.get("served"), r["predicted"]["taps"]) for r in MATRIX["cells"]
           if r.get("agrees") is False]
    assert not bad, bad


def test_the_release_table_is_whole():
    """Ranges do not overlap and leave no gap; every row names a record that exists, with its sources."""
    rows = table("vllm")["releases"]
    for a, b in zip(rows, rows[1:]):
        hi = a["versions"].split("<")[-1]
        assert b["versions"].startswith(f">={hi}"), (a["versions"], b["versions"])
    for r in rows:
        assert r["record"] in RECORDS and RECORDS[r["record"]].sources, r
        assert r.get("evidence"), r


@pytest.mark.parametrize("version, record, note", [
    ("0.32.0", "vllm", None), ("0.28.0", "vllm", None), ("0.27.1", "vllm", None), ("0.25.0", "vllm", None), ("0.24.0", "vllm-0.22", None), ("0.22.0", "vllm-0.22", None),
    ("0.21.0", "vllm-legacy", None), ("0.20.2", "vllm-legacy", None), ("0.17.1", "vllm-0.17", None),
    ("0.33.0", "vllm", "newer than every release"), ("v0.29.1+cpu", "vllm", None)])
def test_a_release_picks_its_record(version, record, note):
    got, said = releases.record_for(version)
    assert got == record
    assert (said is None) if note is None else (note in said)


def test_the_legacy_record_feeds_the_embedding_as_0_21_served():
    """vLLM 0.18-0.21 capture id 0 (the embedding): the old record said it could not, and 0.20/0.21 served it."""
    from workbench.engines.records import ids_for_taps, wiring_for

    assert wiring_for("vllm-legacy", {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}, 8).spec == "embed,L1,L3"
    assert ids_for_taps("vllm-legacy", ["embed", "L1", "L3"], 8).ids == [0, 2, 4]
    assert wiring_for("vllm-legacy", {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}}, 8).spec \
        == "L1,L3,L4"                                 # nested ids are never read: the default (2, 4, 5)
    assert not wiring_for("vllm-0.17", {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}, 8).feasible


def test_a_speculators_config_loses_fc_norm_before_0_25():
    from workbench.engines.records import options_for

    cfg = {"speculators_model_type": "eagle3", "fc_norm": True, "norm_output": True, "norm_before_fc": False}
    old, warnings = options_for("vllm-0.22", cfg)
    new, _ = options_for("vllm", cfg)
    assert (old["fc_norm"], old["norm_output"], new["fc_norm"], new["norm_output"]) == (False, False, True, True)
    assert any("does not copy it" in w for w in warnings)


def _replay_nested(tmp_path, version, **kw):
    """The 0.21.0 server of the nested cell, replayed with its /version answer replaced (None: no /version)."""
    from bench.engine_matrix import make_draft, rows_file

    from workbench.live.recorded import Replay, load
    from workbench.live.vllm_live import compare

    rec = load(ROOT / "tests/data/recordings/engine-matrix/0.21.0/nested.json")
    rec["exchanges"] = [e for e in rec["exchanges"] if e["path"] != "/version"]
    if version is not None:
        rec["exchanges"].insert(0, {"method": "GET", "path": "/version", "reply": {"version": version}})
    return compare(rec["url"], ROOT / MATRIX["target"], make_draft("nested", tmp_path), rows_file(tmp_path),
                   limit=rec["rows"], K=4, client=Replay.of(rec), wirings=["L1,L3,L4", "L0,L3,L4"],
                   served_dtype="float32", probe=0, progress=False, **kw)


def test_an_old_server_is_compared_with_its_own_record_untold(tmp_path):
    """0.21 feeds the default for nested-only ids: told nothing, compare reads /version, picks vllm-legacy, and names
    the served L1,L3,L4 as what the record predicted; the current record would have predicted L0,L2,L3."""
    c = _replay_nested(tmp_path, "0.21.0")
    assert c.settings["engine_record"] == "vllm-legacy" and c.matched == "L1,L3,L4", c.summary()
    assert any("each request's steps and histogram are the /metrics counter deltas" in n for n in c.notes)
    from workbench.engines.records import wiring_for

    assert wiring_for("vllm", json.loads((ROOT / "tests/data/smoke-demo/draft-mismatched/config.json").read_text()),
                      8).spec == "L0,L2,L3"


def test_a_server_of_an_unknown_release_uses_the_nearest_record_and_says_so(tmp_path):
    c = _replay_nested(tmp_path, "0.40.0")
    assert c.settings["engine_record"] == "vllm"
    assert any("newer than every release in the table" in n and "nearest" in n for n in c.notes), c.notes
    c = _replay_nested(tmp_path, None, engine_version="0.21.0", counters_each=True)
    assert c.settings["engine_record"] == "vllm-legacy" and c.matched == "L1,L3,L4"
    assert any("--engine-version 0.21.0" in n for n in c.notes), c.notes


def test_vllm_lint_reads_ids_as_the_given_release(capsys):
    from workbench.cli import main

    cmd = ['vllm', 'lint', '{"method": "eagle3", "model": "tests/data/smoke-demo/draft-mismatched", '
           '"num_speculative_tokens": 4}', "--target", "tests/data/smoke-demo/target", "--device", "cpu"]
    os_cwd = Path.cwd()
    try:
        import os

        os.chdir(ROOT)
        main(cmd + ["--engine-version", "0.21.0"])
        old = capsys.readouterr().out
        main(cmd)
        new = capsys.readouterr().out
    finally:
        os.chdir(os_cwd)
    assert "wiring fed to the draft            L1,L3,L4" in old and "[nested-ids-ignored]" in old
    assert "engine record                      vllm-legacy (vLLM 0.21.0)" in old
    assert "wiring fed to the draft            L0,L2,L3" in new and "[nested-ids-ignored]" not in new


def test_the_docs_table_is_the_matrix_file():
    from bench.engine_matrix import BEGIN, END, load, refresh, table_md

    text = (ROOT / "docs" / "engine-matrix.md").read_text()
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert block == table_md(refresh(load())), "regenerate: python -m bench.engine_matrix --docs"
