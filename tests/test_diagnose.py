"""Wiring diagnosis: candidates, the two-stage ranking, the verdict, one target pass per stage, the CLI.

The smoke demo's target is too briefly trained to tell wirings apart (every wiring reaches α1 = 1.0
on its data), so the ranking tests use a target and drafts built here on a clear task:

- target: a random 8-layer Llama whose attention outputs are zeroed (each position's output depends
  on its own token only) and whose layer k MLP output is scaled by 4**k, so every tap L{k} is a
  different encoding of the token (as in trained models, where shifted taps are different states);
- data: random prompts + the target's greedy continuation (loss_mask 1 on the response);
- drafts: trained with the project's training-time-test step (``train.train_on_batches``) with a
  zero token embedding (saved in the checkpoint), so that what they predict must come from the
  target features: the draft has to learn the wiring it is trained on, as real EAGLE-3 drafts do.
  ``draft-mismatched`` is trained on embed,L1,L3 with config ids [1,3,4] (SGLang feeds L1,L3,L4);
  ``draft-aligned`` on L1,L3,L4 with the same config.
"""

import json
import math

import pytest
import torch
from conftest import save_world, tiny_draft, tiny_target

from workbench.core.errors import WorkbenchError

V, H, N, P, R = 32, 32, 8, 4, 12


def _rows(model, n, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (n, P), generator=g)
    with torch.no_grad():
        for _ in range(R):
            ids = torch.cat([ids, model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    return [{"input_ids": r.tolist(), "loss_mask": [0] * P + [1] * R, "seq_len": P + R, "n_prompt_tokens": P,
             "n_response_tokens": R, "source": ("a", "b")[i % 2], "_row": i, "_where": f"rows:{i + 1}"}
            for i, r in enumerate(ids)]


@pytest.fixture(scope="module")
def wired(tmp_path_factory):
    """Folders target/, draft-mismatched/, draft-aligned/ and val.jsonl of the clear task."""
    from safetensors.torch import load_file, save_file

    from workbench.model import capture, train

    target = tiny_target(vocab_size=V, hidden_size=H, num_hidden_layers=N, num_key_value_heads=4,
                         max_position_embeddings=64, tie_word_embeddings=False)
    model = target.model
    with torch.no_grad():
        for k, layer in enumerate(model.model.layers):
            layer.mlp.down_proj.weight.mul_(4.0 ** k)
            layer.self_attn.o_proj.weight.zero_()
    out = save_world(tmp_path_factory.mktemp("wired"), target, rows=_rows(model, 24, seed=2), data="val.jsonl")
    train_rows = _rows(model, 96, seed=1)
    for name, taps in (("mismatched", ["embed", "L1", "L3"]), ("aligned", ["L1", "L3", "L4"])):
        d = tiny_draft(target, [1, 3, 4], trained=taps, embed=torch.zeros(V, H), seed=0)
        batches = list(capture.extract(target, train_rows, taps, batch_size=32, progress=False))
        opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=1e-2)
        for _ in range(8):
            log = train.train_on_batches(d, batches, taps, K=1, optimizer=opt)
        assert log.acc_per_step[0] > 0.8, f"draft-{name} did not learn its task: {log.acc_per_step}"
        folder = save_world(out, drafts={f"draft-{name}": d}) / f"draft-{name}"
        sd = load_file(str(folder / "model.safetensors"))
        sd["embed_tokens.weight"] = torch.zeros(V, H)          # the draft carries its own (zero) embedding
        save_file(sd, str(folder / "model.safetensors"))
    return out


def _load(wired, name):
    from workbench import rows as data
    from workbench.model import capture
    from workbench.model import checkpoint

    target = capture.load_target(wired / "target")
    return target, checkpoint.load_draft(wired / name, target), data.load(wired / "val.jsonl")


# ---------------------------------------------------------------------------------------- candidates

def test_candidates_cover_presets_trained_shifts_and_embed_variants():
    from workbench.engines.candidates import candidates

    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
           "workbench": {"trained_taps": ["embed", "L1", "L3"]}}
    cs = candidates({"num_hidden_layers": 8}, cfg, engine="sglang")
    by = {c.spec: c for c in cs}
    assert len(by) == len(cs), "candidates must be deduplicated"
    assert cs[0].spec == "L1,L3,L4" and "SGLang" in cs[0].reasons[0]          # the engine's wiring first
    assert "vLLM" in by["L0,L2,L3"].reasons[0]                                  # vLLM reads ids as is
    assert any("trained" in r for r in by["embed,L1,L3"].reasons)
    assert not by["embed,L1,L3"].feasible and "cannot feed the embedding" in by["embed,L1,L3"].why_not
    for spec, why in (("L2,L3,L4", "L1,L3,L4 with L1 +1"), ("L1,L3,L5", "L1,L3,L4 with L4 +1"),
                      ("L2,L4,L5", "L1,L3,L4 all taps +1"), ("L0,L2,L3", "L1,L3,L4 all taps -1"),
                      ("embed,L3,L4", "L1,L3,L4 with embed in the first slot")):
        assert why in by[spec].reasons, (spec, by[spec].reasons)
    assert all(len(set(c.wiring.taps)) == 3 for c in cs)
    w, reasons = cs[0]                                                          # unpacks as (Wiring, reasons)
    assert w.taps == ("L1", "L3", "L4") and reasons == cs[0].reasons


def test_feasibility_rules_and_config_ids():
    from workbench.engines.candidates import cannot_feed, config_ids

    assert "last layer" in cannot_feed("sglang", ("L1", "L3", "L7"), 8)
    assert "layer order" in cannot_feed("vllm", ("L3", "L1", "L4"), 8)
    assert "final" in cannot_feed("sglang", ("L1", "L3", "final"), 8)
    assert cannot_feed("specforge", ("L1", "L3", "L7"), 8) is None
    assert cannot_feed("hf", ("embed", "L1", "L3"), 8) is None
    assert config_ids("sglang-2026.04", ("L0", "L1", "L3"), 8) == [0, 1, 3]
    assert config_ids("sglang", ("L0", "L1", "L3"), 8) is None      # after #25454 no id list reaches L0
    assert config_ids("vllm", ("L0", "L1", "L3"), 8) == [1, 2, 4]
    assert config_ids("sglang", ("embed", "L1", "L3"), 8) is None


# ---------------------------------------------------------------------------------------- diagnosis

def test_mismatched_draft_ranks_trained_wiring_above_sglang_and_says_so(wired):
    from workbench.analysis.diagnose import diagnose

    torch.manual_seed(0)
    target, d, ds = _load(wired, "draft-mismatched")
    dx = diagnose(target, d, ds, engine="sglang", K=3, progress=False)
    trained, served = dx.row("embed,L1,L3"), dx.row("L1,L3,L4")
    assert dx.trained_wiring == "embed,L1,L3" and dx.engine_wiring == "L1,L3,L4"
    assert trained["stage"] == served["stage"] == 2
    assert trained["alpha1"] > served["alpha1"] + 0.3, (trained, served)
    assert trained["rank"] < served["rank"]
    assert trained["accept_length"] > served["accept_length_high"]
    assert dx.best != "L1,L3,L4" and dx.row(dx.best)["alpha1"] > 0.7
    assert not dx.engine_ok and dx.exit_code == 1
    v = dx.verdict
    assert v.startswith(f"the draft was trained on embed,L1,L3 (α1 {trained['alpha1']:.2f}); "
                        f"SGLang (current) feeds L1,L3,L4 (α1 {served['alpha1']:.2f})"), v
    assert f"expect accept length {served['decode_path_accept_length']:.2f} instead of " \
           f"{trained['decode_path_accept_length']:.2f}" in v                 # the decode path: what a server reports
    # SGLang cannot feed the trained taps. Here a wiring it CAN feed (L1,L2,L3 on this task) is as good as the
    # trained one: the cheapest fix is its ids, and only because its interval lies above the engine's
    assert "SGLang cannot feed the embedding (it records taps inside decoder layers only, so never the embedding output); cheapest fix" in v, v
    assert dx.fix in ("ids", "rewire"), v
    if dx.fix == "ids":
        fed = v.split("so that SGLang (current) feeds ")[1].split(" ")[0]
        assert dx.row(fed)["feasible"] and dx.row(fed)["accept_length_low"] > served["accept_length_high"]
        assert dx.row(fed)["accept_length_high"] >= trained["accept_length_low"]          # as good as trained
    else:
        assert "`workbench rewire --target" in v and "retrain on L1,L3,L4" in v
    # the ranked table: stage-2 rows first, those tied with the leader (the trained wiring first), then by
    # accept length; screened-only rows after, by α1
    t = dx.to_frame()
    assert list(t["rank"]) == list(range(1, len(t) + 1))
    s2 = t[t["stage"] == 2]
    assert list(s2.index) == list(range(len(s2)))
    tied, rest = s2[s2["tied_with_best"]], s2[~s2["tied_with_best"]]
    assert list(s2["tied_with_best"]) == [True] * len(tied) + [False] * len(rest)
    assert tied.iloc[0]["spec"] == dx.best == "embed,L1,L3"          # the text's "trained on" heads the ranking
    assert list(rest["accept_length"]) == sorted(rest["accept_length"], reverse=True)
    assert rest["accept_length_high"].max() < tied["accept_length"].max()
    s1 = t[t["stage"] == 1]
    assert s1["accept_length"].isna().all() and list(s1["alpha1"]) == sorted(s1["alpha1"], reverse=True)
    assert len(t) == len(dx.candidates) and set(dx.results) == set(s2["spec"])
    assert "verdict: the draft was trained on embed,L1,L3" in dx.summary()


def test_aligned_draft_gets_a_healthy_verdict(wired):
    from workbench.analysis.diagnose import diagnose

    torch.manual_seed(0)
    target, d, ds = _load(wired, "draft-aligned")
    dx = diagnose(target, d, ds, engine="sglang", K=3, top=2, progress=False)
    served = dx.row("L1,L3,L4")
    assert dx.engine_ok and dx.exit_code == 0
    assert served["alpha1"] > dx.row("embed,L1,L3")["alpha1"] + 0.3
    assert dx.verdict.startswith("SGLang (current) feeds L1,L3,L4"), dx.verdict
    assert f"expect accept length {served['decode_path_accept_length']:.2f}" in dx.verdict
    assert "instead of" not in dx.verdict and "retrain" not in dx.verdict
    assert dx.fix in ("none", "undecided")


def test_one_target_pass_per_stage_on_the_smoke_demo(smoke_demo):
    from workbench import rows as data
    from workbench.model import capture
    from workbench.model import checkpoint
    from workbench.analysis.diagnose import diagnose

    target = capture.load_target(smoke_demo / "target")
    d = checkpoint.load_draft(smoke_demo / "draft-mismatched", target)
    ds = data.load(smoke_demo / "val.jsonl", tokenizer=target.tokenizer)
    with capture.count_forwards(target.model) as c:
        dx = diagnose(target, d, ds, K=2, screen_chains=40, top=2, limit=6, batch_size=4, progress=False)
    n1, n2 = dx.n_screen_samples, dx.n_samples
    assert len(dx.screen) == len(dx.candidates) > 10           # every candidate screened ...
    assert 1 <= n1 < n2 == 6
    assert c["samples"] == n1 + n2                              # ... yet one forward per sample per stage
    assert c["calls"] == math.ceil(n1 / 4) + math.ceil(n2 / 4)
    assert dx.trained_wiring == "embed,L1,L3" and dx.engine_wiring == "L1,L3,L4"


def test_bad_input_is_a_workbench_error(wired):
    from workbench.analysis.diagnose import diagnose

    target, d, ds = _load(wired, "draft-aligned")
    with pytest.raises(WorkbenchError, match="unknown engine 'sglangx'"):
        diagnose(target, d, ds, engine="sglangx", progress=False)
    with pytest.raises(WorkbenchError, match="steps K=0"):
        diagnose(target, d, ds, K=0, progress=False)
    with pytest.raises(WorkbenchError, match="limit=0"):
        diagnose(target, d, ds, limit=0, progress=False)


# ---------------------------------------------------------------------------------------- CLI

def test_cli_exit_codes_and_json(wired, tmp_path, capsys):
    from workbench.cli import main

    base = ["diagnose", "--target", str(wired / "target"), "--data", str(wired / "val.jsonl"), "--steps", "2",
            "--top", "2", "--quiet"]
    out = tmp_path / "dx.json"
    assert main(base + ["--draft", str(wired / "draft-mismatched"), "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "verdict: the draft was trained on embed,L1,L3" in text and "L1,L3,L4" in text
    j = json.loads(out.read_text())
    for key in ("engine", "steps", "verdict", "exit_code", "best", "engine_wiring", "trained_wiring", "table",
                "results"):
        assert key in j, key
    assert j["exit_code"] == 1 and j["engine_wiring"] == "L1,L3,L4" and j["steps"] == 2
    row = j["table"][0]
    for key in ("spec", "reasons", "feasible", "alpha1", "accept_length", "decode_path_accept_length", "n_chains"):
        assert key in row, key
    assert set(j["results"]) == {r["spec"] for r in j["table"] if r["stage"] == 2}
    assert j["results"]["L1,L3,L4"]["steps"] == 2 and "conditional" in j["results"]["L1,L3,L4"]

    assert main(base + ["--draft", str(wired / "draft-aligned")]) == 0
    assert "verdict: SGLang (current) feeds L1,L3,L4" in capsys.readouterr().out

    assert main(base + ["--draft", str(wired / "nope")]) == 2
    assert "error: " in capsys.readouterr().err
    assert main(base + ["--draft", str(wired / "draft-aligned"), "--steps", "0"]) == 2
    assert "steps K=0" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------- torchrun

def test_cli_shard_dir_resumes_both_stages_in_one_process(wired, tmp_path, capsys):
    from workbench.cli import main

    args = ["diagnose", "--target", str(wired / "target"), "--draft", str(wired / "draft-aligned"), "--data",
            str(wired / "val.jsonl"), "--steps", "2", "--top", "1", "--screen-chains", "50", "--quiet",
            "--shard-dir", str(tmp_path / "shards")]
    assert main(args + ["--json", str(tmp_path / "a.json")]) == 0
    err = capsys.readouterr().err
    assert err.count("wrote") == 2 and sorted(p.name for p in (tmp_path / "shards").iterdir()) == \
        ["curves.rank-0-of-1.npz", "screen.rank-0-of-1.npz"]
    assert main(args + ["--json", str(tmp_path / "b.json")]) == 0
    assert capsys.readouterr().err.count("reused") == 2                 # nothing recomputed
    a, b = json.loads((tmp_path / "a.json").read_text()), json.loads((tmp_path / "b.json").read_text())
    assert b["table"] == a["table"] and b["verdict"] == a["verdict"]



def _without_timings(j):
    """The diagnosis JSON minus what depends on measured timings (cost ratio, projected speed-up)."""
    j = dict(j, results={k: {kk: vv for kk, vv in v.items() if kk not in ("cost_ratio", "cost_model", "speedup",
                                                                         "speedup_uncertainty")}
                         for k, v in j["results"].items()})
    return j


@pytest.mark.slow            # ~30 s: one process, then two fresh torchrun processes importing torch
def test_torchrun_two_processes_give_the_single_process_diagnosis(wired, tmp_path, capsys):
    """`torchrun --nproc-per-node 2 -m workbench diagnose` shards both stages (9 screening samples in
    batches of 4: 2 batches on rank 0, 1 on rank 1) and writes the same ranked table, verdict and
    curves as one process; rank 0 alone reports; each stage's shards are kept for resuming."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from workbench.cli import main

    root = Path(__file__).resolve().parents[1]
    args = ["diagnose", "--target", str(wired / "target"), "--draft", str(wired / "draft-mismatched"), "--data",
            str(wired / "val.jsonl"), "--steps", "2", "--top", "2", "--screen-chains", "100", "--batch-size", "4",
            "--quiet"]
    one = tmp_path / "one.json"
    assert main(args + ["--json", str(one)]) == 1
    capsys.readouterr()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    two = tmp_path / "two.json"
    p = subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node", "2",
                        "-m", "workbench"] + args + ["--json", str(two)],
                       cwd=root, env=env, capture_output=True, text=True, timeout=240)
    assert two.exists(), p.stderr[-3000:]
    assert p.returncode == 1, p.stderr[-3000:]                 # the CI gate survives torchrun
    assert p.stdout.count("verdict: the draft was trained on embed,L1,L3") == 1          # rank 0 alone reports
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert a["n_screen_samples"] == 9 and a["n_samples"] == 24
    assert b["table"] == a["table"] and b["verdict"] == a["verdict"]
    assert _without_timings(b) == _without_timings(a)
    assert sorted(os.listdir(str(two) + ".shards")) == [f"{s}.rank-{r}-of-2.npz" for s in ("curves", "screen")
                                                        for r in (0, 1)]


# ---------------------------------------------------------------------------------------- verdicts (issue 22)

def _dx(stats: dict, *, engine_wiring, trained, cfg_ids=(1, 3, 4), engine="sglang", n=20, rewired=None):
    """A Diagnosis over hand-made stage-2 numbers (spec -> (accept length, low, high)) of an 8-layer target."""
    import pandas as pd

    from workbench.engines import wiring as wm
    from workbench.analysis.diagnose import COLUMNS, Diagnosis, rank_tied
    from workbench.engines.candidates import candidates

    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": list(cfg_ids)},
           "workbench": {"trained_taps": trained.split(",")}}
    cands = candidates({"num_hidden_layers": N}, cfg, engine=engine)
    by = {c.spec: c for c in cands}
    st = {s: {"accept_length": a, "accept_length_low": lo, "accept_length_high": hi, "alpha1": 0.5}
          for s, (a, lo, hi) in stats.items()}
    order = rank_tied(list(st), st, trained=trained, engine_wiring=engine_wiring)
    from workbench.analysis.diagnose import clearly_better
    rows = [{"rank": i + 1, "spec": s, "reasons": by[s].reasons if s in by else [], "feasible": by[s].feasible
             if s in by else True, "alpha1": 0.5, "alpha1_low": 0.4, "alpha1_high": 0.6, **st[s],
             "decode_path_accept_length": st[s]["accept_length"], "decode_path_low": st[s]["accept_length_low"],
             "decode_path_high": st[s]["accept_length_high"], "n_chains": 100, "stage": 2,
             "tied_with_best": not clearly_better(st, order[0], s)} for i, s in enumerate(order)]
    eng = wm.resolve(engine, {"num_hidden_layers": N}, cfg)
    dx = Diagnosis(engine=engine, steps=3, table=pd.DataFrame(rows, columns=COLUMNS), results={}, screen={},
                   best=order[0], best_feasible=next((s for s in order if by.get(s) and by[s].feasible), None),
                   engine_wiring=engine_wiring, engine_explanation=eng.explanation, engine_warnings=[],
                   trained_wiring=trained, engine_ok=not any(clearly_better(st, x, engine_wiring) for x in st),
                   verdict="", n_samples=n, candidates=cands, target_config={"num_hidden_layers": N})
    dx.advise(rewired)
    return dx


def test_verdict_suggests_ids_only_when_clearly_better():
    # the trained taps L1,L3,L5 are feedable by SGLang with other ids: the cheapest fix names them
    dx = _dx({"L1,L3,L5": (3.0, 2.8, 3.2), "L1,L3,L4": (2.0, 1.8, 2.2)}, engine_wiring="L1,L3,L4", trained="L1,L3,L5")
    assert dx.fix == "ids" and "cheapest fix: set eagle_config.eagle_aux_hidden_state_layer_ids to [1, 3, 5]" \
        in dx.verdict, dx.verdict
    # overlapping intervals: no suggestion, "undecided" and how many samples would decide
    dx = _dx({"L1,L3,L5": (2.3, 1.9, 2.7), "L1,L3,L4": (2.0, 1.8, 2.2)}, engine_wiring="L1,L3,L4", trained="L1,L3,L5")
    assert dx.fix == "undecided" and "set eagle_config" not in dx.verdict.split("(if it is")[0], dx.verdict
    assert "undecided whether L1,L3,L5" in dx.verdict and "samples (now 20) would decide" in dx.verdict
    assert dx.exit_code == 0 and dx.best == "L1,L3,L5"        # tied: the trained wiring heads the ranking


def test_verdict_order_ids_then_rewire_then_retrain(tmp_path):
    from workbench.analysis.diagnose import find_rewire

    stats = {"embed,L1,L3": (3.1, 2.9, 3.3), "L1,L2,L3": (2.4, 2.1, 2.7), "L1,L3,L4": (2.0, 1.8, 2.2)}
    # a feedable wiring clearly better than the engine's but clearly worse than the trained one: a partial fix,
    # mentioned after the rewire; never the overlapping one as a fix
    dx = _dx(dict(stats, **{"L1,L2,L3": (2.5, 2.3, 2.7)}), engine_wiring="L1,L3,L4", trained="embed,L1,L3")
    assert dx.fix == "rewire" and "a partial fix: " in dx.verdict and "so that SGLang (current) feeds L1,L2,L3" \
        in dx.verdict, dx.verdict
    dx = _dx(stats, engine_wiring="L1,L3,L4", trained="embed,L1,L3")
    assert dx.fix == "rewire" and "partial" not in dx.verdict and "not measured yet" in dx.verdict
    # a measured rewire next to the draft: cited with its recovery and when
    draft = tmp_path / "draft-mismatched"
    draft.mkdir()
    rw = {"from_taps": ["embed", "L1", "L3"], "to_taps": ["L1", "L3", "L4"], "engine": "sglang", "recovered": 0.998,
          "K": 3, "acceptance": {"before": {"accept_length": 2.0}, "after": {"accept_length": 3.098},
                                 "reference": {"accept_length": 3.1}}}
    (tmp_path / "draft-mismatched-rewired.rewire.json").write_text(json.dumps(rw))
    found = find_rewire(draft, "embed,L1,L3", "L1,L3,L4")
    assert found["recovered"] == 0.998 and found["when"].endswith("UTC")
    assert find_rewire(draft, "embed,L1,L3", "L2,L3,L4") is None               # another rewire: not this one
    dx = _dx(stats, engine_wiring="L1,L3,L4", trained="embed,L1,L3", rewired=found)
    assert dx.fix == "rewire" and "recovered 99.8% of the gap (accept length 2.00 → 3.10" in dx.verdict, dx.verdict
    assert "99.8% of the gap recovered" in dx.narrative()
    # a rewire that recovered too little: retrain on the engine's taps
    dx = _dx(stats, engine_wiring="L1,L3,L4", trained="embed,L1,L3", rewired=dict(found, recovered=0.3))
    assert dx.fix == "retrain" and "recovered only 30.0% of the gap" in dx.verdict and "retrain on L1,L3,L4" \
        in dx.verdict


def test_reason_strings_name_the_engine_version_and_never_a_default_as_fed():
    from workbench.engines.candidates import candidates

    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
           "workbench": {"trained_taps": ["embed", "L1", "L7"]}}
    by = {c.spec: c for c in candidates({"num_hidden_layers": 8}, cfg, engine="sglang")}
    assert by["embed,L1,L7"].reasons == ["trained taps (draft config workbench.trained_taps)"]  # no "off by one"
    for c in by.values():
        for r in c.reasons:
            assert not r.startswith("default of"), r
            if "would feed a draft whose config names no layer ids" in r:
                assert "this draft names ids" in r
    assert by["L1,L3,L4"].reasons[0].startswith("fed by SGLang (current); SGLang before 2026-05")


def test_narrative_is_generated_from_the_result():
    dx = _dx({"embed,L1,L3": (3.1, 2.9, 3.3), "L1,L3,L4": (2.0, 1.8, 2.2)}, engine_wiring="L1,L3,L4",
             trained="embed,L1,L3")
    md = dx.narrative()
    assert md.startswith("**Verdict (accept length (decode path, chain K=3, greedy, bonus counted); wirings ranked "
                         "by every position).**")
    assert "`embed,L1,L3` 3.10 [95% 2.90–3.30]" in md and "SGLang (current) feeds `L1,L3,L4`" in md
    assert "Suggested fix: **`workbench rewire`" in md
    dx2 = _dx({"L1,L3,L4": (3.0, 2.8, 3.2), "embed,L1,L3": (2.0, 1.8, 2.2)}, engine_wiring="L1,L3,L4",
              trained="L1,L3,L4")
    assert "Suggested fix: **none needed" in dx2.narrative() and dx2.narrative() != md


def test_a_feedable_wiring_that_overlaps_the_engines_is_named_undecided_not_suggested():
    # the case: L1,L2,L3 is feedable and tied with the trained taps, but its interval overlaps SGLang's
    dx = _dx({"embed,L1,L3": (3.68, 3.12, 4.17), "L1,L2,L3": (3.20, 2.73, 3.62), "L1,L3,L4": (2.49, 2.25, 2.74)},
             engine_wiring="L1,L3,L4", trained="embed,L1,L3", n=16)
    assert dx.fix == "rewire" and "cheapest fix to try: `workbench rewire" in dx.verdict
    assert "(undecided: set eagle_config.eagle_aux_hidden_state_layer_ids to [1, 2, 3] so that SGLang (current) " \
           "feeds L1,L2,L3" in dx.verdict and "samples (now 16) would decide" in dx.verdict, dx.verdict
    assert "cheapest fix: set" not in dx.verdict


def test_the_trained_wiring_that_is_also_the_engines_is_one_row():
    """Issue 29: draft-aligned is trained on what SGLang feeds; the diagnosis listed that wiring twice."""
    from workbench.analysis.diagnose import rank_tied

    st = {s: {"accept_length": a, "accept_length_low": a - 0.2, "accept_length_high": a + 0.2, "alpha1": 0.5}
          for s, a in {"L1,L3,L4": 3.0, "L1,L3,L5": 2.9, "embed,L1,L3": 1.5}.items()}
    order = rank_tied(["L1,L3,L4", "L1,L3,L5", "L1,L3,L4", "embed,L1,L3"], st, trained="L1,L3,L4",
                      engine_wiring="L1,L3,L4")
    assert order == ["L1,L3,L4", "L1,L3,L5", "embed,L1,L3"]
    dx = _dx({"L1,L3,L4": (3.0, 2.8, 3.2), "L1,L3,L5": (2.9, 2.7, 3.1)}, engine_wiring="L1,L3,L4", trained="L1,L3,L4")
    assert list(dx.table["spec"]) == ["L1,L3,L4", "L1,L3,L5"]
