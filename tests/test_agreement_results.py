"""Greedy agreement in every result: hand-made data through `accept`, `diagnose` and `tune` (the numbers,
per sample and source, in the summary and the JSON), the warning once per run and never for agreeing
data, the note for recorded-sampled data, and the exact merge of the agreement over torchrun shards."""

import json
import warnings

import pytest
import torch
from conftest import greedy_rows, save_world, tiny_draft, tiny_target

from workbench.simulate import acceptance
from workbench.load.agreement import (Agreement, AgreementWarning, data_note, greedy_matches_reference,
                                 plain_warnings, sampling_note)
from workbench.cli import main
from workbench.core.setting import Setting

K = 2
SAMPLED = {"by": "target", "temperature": 0.7, "top_p": 0.9, "top_k": -1, "seed": 3}


@pytest.fixture(scope="module")
def world():
    """A tiny target and draft; 6 target-greedy rows (sources a/b) and the same prompts with every
    response token replaced by another one (source "foreign")."""
    target = tiny_target(num_hidden_layers=3)
    draft = tiny_draft(target, [0, 1, 2], seed=0)
    greedy = greedy_rows(target, [7, 8, 6, 9, 7, 8])
    foreign = []
    for r in greedy:
        n = r["n_prompt_tokens"]
        ids = r["input_ids"][:n] + [(t * 7 + 3) % target.vocab_size for t in r["input_ids"][n:]]
        foreign.append({**r, "input_ids": ids, "_row": r["_row"] + len(greedy), "source": "foreign"})
    return target, draft, greedy, foreign


def reference_counts(target, row) -> tuple[int, int]:
    """(matches, response tokens) of one row from a plain, unbatched forward: the hand check."""
    with torch.no_grad():
        g = target.model(torch.tensor([row["input_ids"]])).logits[0].argmax(-1).tolist()
    return greedy_matches_reference(row["input_ids"], g, row["loss_mask"])


def by_row(result) -> dict:
    s = result.samples
    return {int(r): (int(n), int(d)) for r, n, d in zip(s["sample"], s["n_agree"], s["n_agree_tokens"])}


def test_accept_result_carries_the_agreement_per_sample_and_source(world):
    target, draft, greedy, foreign = world
    rows = greedy + foreign
    res = acceptance.simulate(target, draft, rows, ["L0,L1,L2"], K=K, batch_size=4, progress=False)["L0,L1,L2"]
    got = by_row(res)
    for r in rows:
        assert got[r["_row"]] == reference_counts(target, r), r["_row"]
    for r in greedy:                                                 # the target's own greedy output
        assert got[r["_row"]][0] == got[r["_row"]][1] > 0
    a = res.agreement
    n_f = sum(got[r["_row"]][0] for r in foreign)
    d_f = sum(got[r["_row"]][1] for r in foreign)
    assert a.by_source()["foreign"]["share"] == pytest.approx(n_f / d_f) and n_f / d_f < 0.5
    assert a.by_source()["a"]["share"] == 1.0 and a.by_source()["b"]["share"] == 1.0
    assert res.greedy_agreement == pytest.approx(a.share)
    assert sorted(a.to_frame()["row"]) == sorted(r["_row"] for r in rows)

    js = json.loads(json.dumps(res.to_json()))
    assert js["greedy_agreement"] == pytest.approx(a.share)
    assert js["by_source"]["foreign"]["greedy_agreement"] == pytest.approx(n_f / d_f)
    assert js["by_source"]["a"]["greedy_agreement"] == 1.0
    assert js["agreement"]["by_source"]["foreign"]["tokens"] == d_f
    assert js["agreement"]["lowest"][0]["source"] == "foreign"
    assert "teacher-forced acceptance on your data" in js["agreement"]["note"]
    line = next(x for x in res.summary().splitlines() if x.startswith("data: greedy agreement"))
    assert f"{a.share:.3f}" in line and "foreign" in line and "workbench regenerate" in line

    # per source: the filtered result keeps its samples' agreement; on greedy data the note says all is well
    ok = res.filter("a")
    assert ok.greedy_agreement == 1.0 and ok.data_note() is None
    assert "the target's own greedy output" in ok.summary()


def test_accept_warns_once_per_run_and_never_for_agreeing_data(world):
    target, draft, greedy, foreign = world
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res, _ = acceptance.accept(target, draft, greedy + foreign, wiring="L0,L1,L2", K=K, batch_size=4,
                                   progress=False)
    mine = [x for x in w if issubclass(x.category, AgreementWarning)]
    assert len(mine) == 1
    text = str(mine[0].message)
    for words in ("teacher-forced acceptance on your data", "decode path is an approximation",
                  "workbench regenerate"):
        assert words in text
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res, _ = acceptance.accept(target, draft, greedy, wiring="L0,L1,L2", K=K, progress=False)
    assert not [x for x in w if issubclass(x.category, AgreementWarning)]
    assert res.greedy_agreement == 1.0 and res.data_note() is None


def test_sampled_data_is_judged_by_its_recorded_settings(world):
    target, draft, greedy, foreign = world
    sampled = [{**r, "generation": SAMPLED} for r in foreign]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res, _ = acceptance.accept(target, draft, sampled, wiring="L0,L1,L2", K=K, progress=False)
    assert not [x for x in w if issubclass(x.category, AgreementWarning)]    # no agreement warning
    note = res.data_note()
    assert "all 6 samples were sampled by their writer at T=0.7 top_p=0.9" in note
    assert "not by greedy agreement" in note and "greedy agreement 0." not in note
    js = res.to_json()["agreement"]
    assert js["sampled_at"] == {"T=0.7 top_p=0.9": 6} and js["generations"] == {"sampled": 6}
    assert js["note"] == note
    assert "sampled by their writer at T=0.7" in res.summary()
    # the stable entry point another module calls, from the rows alone (no model)
    assert data_note(sampled) == note
    assert data_note(greedy) is None
    asked = Setting(steps=K, temperature=0.7, top_p=0.9)
    assert "the settings this run evaluates" in data_note(sampled, asked)
    assert "but all 6 samples" not in data_note(sampled, Setting(steps=K, temperature=1.0))
    assert "but 6 samples were sampled at T=0.7 top_p=0.9" in data_note(sampled, Setting(steps=K, temperature=1.0))
    assert "no sample records being sampled" in data_note(greedy, asked)
    # mixed data: the greedy-judged part still warns on its own agreement
    mixed = Agreement.from_samples(acceptance.simulate(target, draft, sampled[:3] + foreign[3:], ["L0,L1,L2"], K=K,
                                                       progress=False)["L0,L1,L2"].samples)
    assert mixed.generations == {"sampled": 3, "not recorded": 3}
    assert "3 of 6 samples were sampled" in mixed.note() and "greedy agreement" in mixed.note()
    assert sampling_note({}, 4) is None


def test_cli_accept_and_diagnose_show_the_agreement_and_warn_once(world, tmp_path, capsys):
    target, draft, greedy, foreign = world
    save_world(tmp_path, target, {"draft": draft}, greedy + foreign, data="foreign.jsonl")
    save_world(tmp_path, rows=greedy, data="greedy.jsonl")
    base = ["--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"), "--steps", str(K), "--quiet",
            "--cost-ratio", "0.05"]
    assert main(["accept", "--data", str(tmp_path / "foreign.jsonl"), "--wiring", "L0,L1,L2", *base,
                 "--json", str(tmp_path / "acc.json")]) == 0
    out, err = capsys.readouterr()
    assert err.count("warning: greedy agreement") == 1 and "Warning" not in err      # plain words, once
    assert "data: greedy agreement" in out
    js = json.loads((tmp_path / "acc.json").read_text())
    assert js["agreement"]["by_source"]["foreign"]["share"] < 0.5 and js["agreement"]["note"]

    rc = main(["diagnose", "--data", str(tmp_path / "foreign.jsonl"), "--engine", "sglang", *base,
               "--screen-chains", "20", "--top", "1", "--json", str(tmp_path / "dx.json")])
    assert rc in (0, 1)
    out, err = capsys.readouterr()
    assert err.count("warning: greedy agreement") == 1                            # not once per stage
    assert out.splitlines()[2].startswith("data: greedy agreement")
    dx = json.loads((tmp_path / "dx.json").read_text())
    assert dx["agreement"]["share"] == pytest.approx(js["agreement"]["share"])
    assert all(r["agreement"]["share"] == dx["agreement"]["share"] for r in dx["results"].values())

    assert main(["accept", "--data", str(tmp_path / "greedy.jsonl"), "--wiring", "L0,L1,L2", *base]) == 0
    out, err = capsys.readouterr()
    assert "warning" not in err and "data: greedy agreement 1.000" in out


def test_tune_result_carries_the_agreement(world, tmp_path, capsys):
    from workbench.analysis.tune import sweep

    target, draft, greedy, foreign = world
    with warnings.catch_warnings(record=True):
        sw = sweep(target, draft, greedy + foreign, "L0,L1,L2", steps=(1, 2), topks=(1, 2), max_tokens=4,
                   progress=False)
    ref = acceptance.simulate(target, draft, greedy + foreign, ["L0,L1,L2"], K=K, progress=False)["L0,L1,L2"]
    assert sw.agreement.share == pytest.approx(ref.greedy_agreement)
    assert "data: greedy agreement" in sw.summary()
    assert sw.to_json()["agreement"]["by_source"]["foreign"]["share"] == pytest.approx(
        ref.agreement.by_source()["foreign"]["share"])
    save_world(tmp_path, target, {"draft": draft}, greedy + foreign, data="foreign.jsonl")
    assert main(["tune", "--target", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"), "--data",
                 str(tmp_path / "foreign.jsonl"), "--wiring", "L0,L1,L2", "--steps", "1,2", "--eagle-topk", "1",
                 "--quiet", "--json", str(tmp_path / "sw.json")]) == 0
    out, err = capsys.readouterr()
    assert err.count("warning: greedy agreement") == 1 and "data: greedy agreement" in out
    assert json.loads((tmp_path / "sw.json").read_text())["agreement"]["note"]


def test_agreement_merges_exactly_over_shards(world):
    from workbench.simulate import distributed

    target, draft, greedy, foreign = world
    rows = greedy + [{**r, "generation": SAMPLED} for r in foreign[:2]] + foreign[2:]
    one = acceptance.simulate(target, draft, rows, ["L0,L1,L2"], K=K, batch_size=2, progress=False)["L0,L1,L2"]
    parts = []
    for rank in range(2):
        shard = distributed.shard_rows(rows, rank, 2, 2)
        part = acceptance.simulate(target, draft, shard, ["L0,L1,L2"], K=K, batch_size=2, progress=False)
        parts.append(distributed.decode_results(distributed.encode_results(part))[0])   # through a shard file
    merged = distributed.gather_results(parts, order=[r["_row"] for r in rows])["L0,L1,L2"]
    assert by_row(merged) == by_row(one)
    assert merged.agreement.to_dict() == one.agreement.to_dict()
    assert merged.agreement.generations == {"sampled": 2, "not recorded": 10}


def test_plain_warnings_prints_agreement_warnings_once_and_passes_others_on(capsys):
    import io

    buf = io.StringIO()
    with plain_warnings(buf):
        for _ in range(2):
            warnings.warn("greedy agreement 0.5 < 0.98: ...", AgreementWarning)
        with pytest.warns(UserWarning, match="other"):
            warnings.warn("other", UserWarning)
    assert buf.getvalue() == "warning: greedy agreement 0.5 < 0.98: ...\n"


def test_agreement_figure_and_measure_on_its_own(world):
    from workbench.load import agreement
    from workbench.report import plots
    from workbench.model.capture import count_forwards

    target, draft, greedy, foreign = world
    with count_forwards(target.model) as c:
        a = agreement.measure(target, greedy + foreign, batch_size=12)
    assert c["calls"] == 1                                           # one target pass
    assert a.by_source()["foreign"]["share"] < 0.5 and a.by_source()["a"]["share"] == 1.0
    fig = plots.agreement_by_sample(a, others={"foreign only": Agreement.from_samples(
        acceptance.simulate(target, draft, foreign, ["L0,L1,L2"], K=K, progress=False)["L0,L1,L2"].samples)})
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["a", "b", "foreign", "foreign only · foreign"]
