"""workbench.analysis.rewire: streamed ridge vs direct solves, config ids per engine, exact recovery of a
permuted wiring, fine-tune scope, refusals, and `workbench rewire` end to end on the smoke demo."""

import json
import math

import pytest
import torch
from conftest import random_rows, tiny_draft, tiny_target

from workbench.core.errors import WorkbenchError
from workbench.analysis.rewire import (ALPHAS, NormalEquations, config_for_taps, finetune, fit_ridge, recovered_share,
                              refit_fc, resolve_taps, rewire, with_fc)


def _stream(X, Y, intercept=False, chunks=(7, 50, 1, 100)):
    ne = NormalEquations(X.shape[1], Y.shape[1], intercept)
    i = 0
    for c in itertools_cycle(chunks):
        if i >= len(X):
            break
        ne.update(X[i:i + c], Y[i:i + c])
        i += c
    return ne


def itertools_cycle(xs):
    while True:
        yield from xs


def _data(n=300, d=12, m=5, noise=0.1, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g) * torch.linspace(0.5, 3, d) + 2.0     # off-centre, uneven scales
    W = torch.randn(d, m, generator=g)
    Y = X @ W + 0.7 + noise * torch.randn(n, m, generator=g)
    return X, Y


_KEY = "eagle_aux_hidden_state_layer_ids"


def test_streamed_solve_matches_direct_lstsq():
    X, Y = _data()
    Xd, Yd = X.double(), Y.double()
    W, b = _stream(X, Y).solve(0.0)
    assert b is None
    direct = torch.linalg.lstsq(Xd, Yd, driver="gelsd").solution
    assert torch.allclose(W, direct, atol=1e-8)

    lam = 25.0   # ridge = least squares on the data stacked over sqrt(lam)*I
    W, _ = _stream(X, Y).solve(lam)
    aug = torch.linalg.lstsq(torch.cat([Xd, lam ** 0.5 * torch.eye(12, dtype=torch.float64)]),
                             torch.cat([Yd, torch.zeros(12, 5, dtype=torch.float64)]), driver="gelsd").solution
    assert torch.allclose(W, aug, atol=1e-8)
    assert not torch.allclose(W, direct, atol=1e-3)          # the penalty really acts


def test_streamed_solve_with_intercept_matches_direct():
    X, Y = _data(seed=1)
    Xd, Yd = X.double(), Y.double()
    W, b = _stream(X, Y, intercept=True).solve(0.0)
    full = torch.linalg.lstsq(torch.cat([Xd, torch.ones(len(X), 1, dtype=torch.float64)], 1), Yd,
                              driver="gelsd").solution
    assert torch.allclose(W, full[:-1], atol=1e-8) and torch.allclose(b, full[-1], atol=1e-8)
    lam = 40.0   # intercept unpenalised: ridge on centred data, b = ȳ - x̄W
    W, b = _stream(X, Y, intercept=True).solve(lam)
    Xc, Yc = Xd - Xd.mean(0), Yd - Yd.mean(0)
    aug = torch.linalg.lstsq(torch.cat([Xc, lam ** 0.5 * torch.eye(12, dtype=torch.float64)]),
                             torch.cat([Yc, torch.zeros(12, 5, dtype=torch.float64)]), driver="gelsd").solution
    assert torch.allclose(W, aug, atol=1e-8)
    assert torch.allclose(b, Yd.mean(0) - Xd.mean(0) @ aug, atol=1e-8)


def test_sse_and_sst_from_statistics_equal_direct_sums():
    X, Y = _data(seed=2)
    ne = _stream(X, Y, intercept=True)
    W, b = torch.randn(12, 5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    direct = float(((Y.double() - X.double() @ W - b) ** 2).sum())
    assert ne.sse(W, b) == pytest.approx(direct, rel=1e-9)
    assert ne.sst() == pytest.approx(float(((Y.double() - Y.double().mean(0)) ** 2).sum()), rel=1e-9)
    merged = _stream(X[:100], Y[:100], True) + _stream(X[100:], Y[100:], True)
    assert torch.allclose(merged.xtx, ne.xtx) and merged.n == ne.n == 300


def test_ridge_strength_is_chosen_on_the_heldout_split():
    # few rows, many inputs, heavy noise: plain least squares overfits, the held-out split must pick a real λ
    X, Y = _data(n=60, d=40, m=3, noise=3.0, seed=3)
    fit, held = _stream(X[:40], Y[:40]), _stream(X[40:], Y[40:])
    ridge = fit_ridge(fit, held)
    assert ridge.alpha > ALPHAS[0]
    mses = [g["heldout_mse"] for g in ridge.grid if g["heldout_mse"] is not None]
    assert min(mses) < mses[0]
    assert tuple(ridge.weight.shape) == (3, 40) and (ridge.n_fit, ridge.n_heldout) == (40, 20)
    # noiseless: the fit is exact whatever λ was picked
    X, Y = _data(noise=0.0, seed=4)
    exact = fit_ridge(_stream(X[:200], Y[:200], True), _stream(X[200:], Y[200:], True))
    assert exact.r2_heldout > 0.999999


def test_singular_system_and_empty_split_are_clear_errors():
    ne = NormalEquations(4, 2)
    ne.update(torch.zeros(10, 4), torch.randn(10, 2))
    with pytest.raises(WorkbenchError, match="singular"):
        ne.solve(0.0)
    with pytest.raises(WorkbenchError, match="held-out"):
        fit_ridge(_stream(*_data(n=50, d=12)), NormalEquations(12, 5))
    with pytest.raises(WorkbenchError, match=r"expected \[n, 4\]"):
        ne.update(torch.zeros(3, 5), torch.zeros(3, 2))


def test_config_ids_make_each_engine_feed_the_new_taps():
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 4]}, "workbench": {"trained_taps": ["embed"]}}
    for engine in ("sglang", "vllm", "specforge", "sglang-2026.04"):   # the same export whatever engine is named
        out, r = config_for_taps(cfg, engine, ("L1", "L3", "L4"), 8)
        assert out["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4] and r.spec == "L1,L3,L4"
        assert out["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]         # vLLM's convention, top level
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 3, 4]      # input untouched
    # L2,L3,L4: current SGLang reads ids not starting at 1 as capture points ([3,4,5]); older SGLang +1
    out, r = config_for_taps(cfg, "sglang", ("L2", "L3", "L4"), 8)
    assert out["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [3, 4, 5] and r.spec == "L2,L3,L4"
    assert any("sglang-2026.04 needs [2, 3, 4]" in w for w in r.warnings)
    out, r = config_for_taps(cfg, "sglang-2026.04", ("L2", "L3", "L4"), 8)
    assert out["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 3, 4]
    with pytest.raises(WorkbenchError, match="sglang cannot be made to feed embed,L3,L4: SGLang cannot feed the emb"):
        config_for_taps(cfg, "sglang", ("embed", "L3", "L4"), 8)
    with pytest.raises(WorkbenchError, match="sglang cannot be made to feed"):
        config_for_taps(cfg, "sglang", ("L4", "L1", "L3"), 8)    # SGLang concatenates in layer order
    # vLLM can feed embed and the last layer: the export keeps no SGLang ids and says so
    out, r = config_for_taps(cfg, "vllm", ("embed", "L3", "L7"), 8)
    assert out["eagle_aux_hidden_state_layer_ids"] == [0, 4, 8] and "eagle_aux_hidden_state_layer_ids" not in \
        out.get("eagle_config", {}) and any("no eagle_config ids" in w for w in r.warnings)


@pytest.mark.parametrize("taps", [("L1", "L15", "L28"), ("L3", "L9", "L30"), ("L0", "L14", "L27")])
def test_a_rewired_checkpoint_serves_on_both_engines(taps, tmp_path):
    """The written config.json, loaded through each engine record, feeds the same taps."""
    from workbench import engines
    from workbench.model.checkpoint import load_draft, save_draft
    from workbench.model.draft import Eagle3Draft, new_draft_config

    base = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4,
                             "intermediate_size": 64}, layer_ids=[1, 2, 3])
    cfg, r = config_for_taps(base, "vllm", taps, 32)
    d = Eagle3Draft.from_config(cfg, torch.zeros(50, 32))
    save_draft(d, tmp_path / "d")
    written = json.loads((tmp_path / "d" / "config.json").read_text())
    sglang = "sglang" if taps[0] != "L0" else "sglang-2026.04"     # L0: only SGLang before #25454 can feed it
    feeds = {e: engines.wiring_for(e, written, 32) for e in ("vllm", sglang, "vllm-legacy")}
    assert {e: f.taps for e, f in feeds.items()} == dict.fromkeys(feeds, taps), feeds
    assert (taps[0] == "L0") == any("are for sglang-2026.04" in w for w in r.warnings)
    assert load_draft(tmp_path / "d").raw_config[_KEY] == written[_KEY]


def test_save_draft_keeps_each_key_in_its_own_convention(tmp_path):
    """A speculators draft's vLLM-convention ids are not copied under eagle_config (one layer off there)."""
    from workbench import engines
    from workbench.model.checkpoint import save_draft
    from workbench.model.draft import Eagle3Draft, new_draft_config

    cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64})
    cfg[_KEY] = [2, 16, 29]
    save_draft(Eagle3Draft.from_config(cfg, torch.zeros(50, 32)), tmp_path / "d")
    written = json.loads((tmp_path / "d" / "config.json").read_text())
    assert written[_KEY] == [2, 16, 29] and _KEY not in (written.get("eagle_config") or {})
    assert engines.wiring_for("vllm", written, 32).spec == "L1,L15,L28"


# ───────────────────────── a tiny random target and draft ─────────────────────────

def _tiny(hidden=32, layers=6, vocab=64, seed=0):
    target = tiny_target(seed, vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, max_position_embeddings=2048,   # LlamaConfig's default
                         initializer_range=0.3)                                     # big layer updates: taps differ
    draft = tiny_draft(target, [1, 2, 3], trained=["L1", "L2", "L3"])
    rows = [{**r, "_row": i, "n_prompt_tokens": 3}
            for i, r in enumerate(random_rows(vocab, [12, 16, 9, 14, 16, 11, 13, 10, 15, 12] * 2, prompt=3, seed=seed))]
    return target, draft, rows


def test_permuted_wiring_is_recovered_exactly():
    """B = a permutation of A: the refit must find the permuted fc, and the chains must not change."""
    from workbench.model.capture import extract
    from workbench.model.draft import run_chains

    target, draft, rows = _tiny(hidden=16)
    A, B = ("L1", "L2", "L3"), ("L3", "L1", "L2")
    ridge, info = refit_fc(target, draft, rows, A, B, batch_size=10, progress=False)
    H = target.hidden_size
    W = draft.fc.weight.detach()
    permuted = torch.cat([W[:, 2 * H:], W[:, :H], W[:, H:2 * H]], dim=1)
    assert ridge.r2_heldout > 0.9999 and info["r2_naive"] < 0.8
    assert torch.allclose(ridge.weight.float(), permuted, atol=1e-4)
    new = with_fc(draft, ridge.weight, ridge.bias, draft.config)
    batch = next(extract(target, rows, [",".join(A), ",".join(B)], batch_size=20, progress=False))
    ref = run_chains(draft, batch.concat(A), batch.input_ids, batch.attention_mask, K=3).tokens
    miswired = run_chains(draft, batch.concat(B), batch.input_ids, batch.attention_mask, K=3).tokens
    rewired = run_chains(new, batch.concat(B), batch.input_ids, batch.attention_mask, K=3).tokens
    real = batch.attention_mask.bool()
    assert bool((rewired == ref)[real].all())
    assert float((miswired == ref)[real].float().mean()) < 0.6, float((miswired == ref)[real].float().mean())
    for name, p in new.named_parameters():            # only fc changed
        if not name.startswith("fc."):
            assert torch.equal(p, dict(draft.named_parameters())[name])


def test_finetune_fc_only_trains_fc_and_restores_flags():
    target, draft, rows = _tiny(seed=1)
    before = {n: p.detach().clone() for n, p in draft.named_parameters()}
    log = finetune(draft, target, rows, ["L2", "L3", "L4"], 3, part="fc", K=2, lr=1e-2, batch_size=4,
                   progress=False)
    assert log.steps == 3 and len(log.losses) == 3
    changed = {n for n, p in draft.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {"fc.weight"}
    assert all(p.requires_grad for n, p in draft.named_parameters() if not n.startswith("embed_tokens"))
    finetune(draft, target, rows, ["L2", "L3", "L4"], 1, part="all", K=2, batch_size=4, progress=False)
    assert not torch.equal(draft.midlayer.mlp.up_proj.weight, before["midlayer.mlp.up_proj.weight"])
    with pytest.raises(WorkbenchError, match="finetune part"):
        finetune(draft, target, rows, ["L2", "L3", "L4"], 1, part="head", progress=False)


def test_refusals_name_the_problem():
    target, draft, rows = _tiny(seed=2)
    with pytest.raises(WorkbenchError, match="nothing to rewire"):
        resolve_taps(target, draft, taps="L1,L2,L3")
    with pytest.raises(WorkbenchError, match="expects input width"):
        resolve_taps(target, draft, taps="L1,L2")
    with pytest.raises(WorkbenchError, match="--from-taps"):
        resolve_taps(target, type(draft).from_config({k: v for k, v in draft.config.items() if k != "workbench"},
                                                     target.embed_weight()), taps="L2,L3,L4")
    wide, _, _ = _tiny(hidden=48, seed=2)
    with pytest.raises(WorkbenchError, match="target hidden size 32.*hidden size 48"):
        resolve_taps(wide, draft, taps="L2,L3,L4")
    with pytest.raises(WorkbenchError, match="sglang cannot be made to feed"):
        rewire(target, draft, rows, taps="embed,L2,L3", engine="sglang", progress=False)
    assert recovered_share(1.5, 1.875, 2.0) == pytest.approx(0.75)
    assert math.isnan(recovered_share(2.0, 2.0, 2.0))


# ───────────────────────── end to end on the smoke demo ─────────────────────────

def test_cli_rewire_smoke_demo(smoke_demo, tmp_path, capsys):
    from safetensors import safe_open

    from workbench.model.capture import load_target
    from workbench.cli import main
    from workbench.model.checkpoint import load_draft
    from workbench.engines.wiring import resolve

    d = smoke_demo
    out, js = tmp_path / "rewired", tmp_path / "rewire.json"
    args = ["rewire", "--target", str(d / "target"), "--draft", str(d / "draft-mismatched"),
            "--data", str(d / "train.jsonl"), "--eval-data", str(d / "val.jsonl"), "--engine", "sglang",
            "--out", str(out), "--steps", "3", "--finetune-steps", "2", "--json", str(js), "--quiet"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "rewired embed,L1,L3 → L1,L3,L4 for sglang" in text and "reference" in text

    cfg = json.loads((out / "config.json").read_text())
    assert cfg["workbench"]["rewired_from"] == ["embed", "L1", "L3"]
    assert cfg["workbench"]["trained_taps"] == ["L1", "L3", "L4"]
    assert "ridge" in cfg["workbench"]["method"] and "fine-tune" in cfg["workbench"]["method"]
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    for engine in ("sglang", "sglang-2026.04", "vllm", "vllm-legacy"):    # serves on both engines
        assert resolve(engine, d / "target", cfg).taps == ("L1", "L3", "L4"), engine
    with safe_open(out / "model.safetensors", "pt") as f, \
            safe_open(d / "draft-mismatched" / "model.safetensors", "pt") as g:
        assert set(f.keys()) == set(g.keys()) and not any("embed" in k for k in f.keys())   # SpecForge layout

    res = json.loads(js.read_text())
    assert res["ridge"]["r2_heldout"] > 0.9 > res["refit"]["r2_naive"]
    for key in ("before", "after", "reference", "after_closed_form"):
        assert res["acceptance"][key]["n_chains"] > 0
    assert res["finetune"]["steps"] == 2

    target = load_target(d / "target")
    old, new = load_draft(d / "draft-mismatched", target), load_draft(out, target)
    assert not torch.equal(old.fc.weight, new.fc.weight)
    assert torch.equal(old.midlayer.self_attn.q_proj.weight, new.midlayer.self_attn.q_proj.weight)

    # refusing: taps B == A (exit 2, one line naming both)
    assert main(args[:9] + ["--taps", "embed,L1,L3", "--out", str(tmp_path / "x"), "--quiet"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "embed,L1,L3" in err[0] and "nothing to rewire" in err[0]
