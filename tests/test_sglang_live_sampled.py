"""`workbench sglang compare` at temperature > 0 (issue 21 item 4): the stand-in server samples as SGLang
does (deterministic trees, target-only verification), the client sends every sampling parameter, and
the per-request fingerprints still name the served wiring because A is a function of the trees and
the server's own sampled output.

The world is test_sglang_live's (a target that repeats the current token, drafts that draft it when fed
the taps they were built for) with the target's lm_head scaled down, so that at T = 0.7 the target
often samples another token: outputs differ from the greedy ones and A varies from step to step.
"""

import copy
import json

import pytest
import torch
from conftest import save_world
from test_sglang_live import K, MISMATCHED, PROMPT, RESPONSE, SERVED, _build

from workbench.cli import main
from workbench.core.errors import WorkbenchError
from workbench.testing.fake_sglang import SAMPLING_FIELDS, sampled_generator, serve
from workbench.live.fingerprint import offline_requests
from workbench.core.sampling import row_seed
from workbench.live.sglang_live import compare

T = 0.7


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    w = _build(tmp_path_factory)
    target = copy.deepcopy(w["target"])
    with torch.no_grad():
        target.model.lm_head.weight.mul_(1 / 8)       # top logit 4 instead of 32: p(top) ~ 0.5-0.9 at T = 0.7
    g = torch.Generator().manual_seed(2)
    rows = list(w["rows"])
    for i in range(6, 12):                          # 12 requests: enough for the sign test when a wiring is close
        prompt = torch.randint(0, 48, (PROMPT,), generator=g).tolist()
        ids = prompt + [prompt[-1]] * RESPONSE
        rows.append({**rows[0], "input_ids": ids, "_row": i, "_where": f"val.jsonl:{i + 1}"})
    root = save_world(tmp_path_factory.mktemp("warm"), target, {f"draft-{k}": d for k, d in w["drafts"].items()},
                      rows, data="val.jsonl")
    return {**w, "target": target, "root": root, "rows": rows}


# ─────────────────────────────── the stand-in's sampled decode ───────────────────────────────
# (the walk itself: tests/test_verify_walk.py; the stand-in uses verify_walk.sampled_tree_decode)

def test_walk_hook_reproduces_the_greedy_tree_decode(warm):
    """exact_tree_decode's walk= hook: a walk that takes the argmax gives the greedy decode exactly."""
    from workbench.simulate.tree_verify import exact_tree_decode, greedy_walk

    def argmax_walk(tokens, parents, logits):
        pred = logits.argmax(-1).tolist()
        a, path = greedy_walk(tokens, parents, pred, K) if tokens else (0, [])
        return path, pred[path[-1] if path else 0]

    target, draft = warm["target"], warm["drafts"]["aligned"]
    prompt = warm["rows"][0]["input_ids"][:PROMPT]
    for topk, nd in ((1, None), (2, 5)):
        ref = exact_tree_decode(target, draft, prompt, SERVED, K, topk, nd, RESPONSE)
        assert exact_tree_decode(target, draft, prompt, SERVED, K, topk, nd, RESPONSE, walk=argmax_walk) == ref


@pytest.mark.parametrize("topk, n_draft", [(1, None), (2, 5)])
def test_sampled_decode_is_reproduced_offline_from_its_own_output(warm, topk, n_draft):
    """The stand-in's sampled decode against the fast offline decode of its outputs: every verify step's
    A equal, the last one within its open range; outputs really are samples (not the greedy ones)."""
    target, draft = warm["target"], warm["drafts"]["aligned"]
    gen = sampled_generator(target, draft, SERVED, K, topk, n_draft, seed=0)
    prompts = [r["input_ids"][:PROMPT] for r in warm["rows"][:6]]
    runs = [gen(p, RESPONSE, sampling_params={"temperature": T}) for p in prompts]
    assert runs == [gen(p, RESPONSE, sampling_params={"temperature": T}) for p in prompts]      # seeded
    greedy = [gen(p, RESPONSE, sampling_params={"temperature": 0})[0] for p in prompts]
    assert sum(out != g for (out, _), g in zip(runs, greedy)) >= 3                             # really sampled
    assert len({a for _, acc in runs for a in acc}) >= 2                                       # A varies
    off = offline_requests(target, draft, [(p, out) for p, (out, _) in zip(prompts, runs)], [SERVED], steps=K,
                           topk=topk, num_draft_tokens=n_draft, sampled=True)[SERVED]
    for (out, acc), st in zip(runs, off):
        assert st.accepts[:-1] == acc[:-1] and len(st.accepts) == len(acc)
        hi = acc[-1] if st.last_max is None else st.last_max
        assert st.accepts[-1] <= acc[-1] <= hi and not any(st.fragile)


# ─────────────────────────────── live comparison at T > 0 ───────────────────────────────

@pytest.mark.parametrize("topk, n_draft", [(1, None), (2, 5)])
def test_right_wiring_live_equals_offline_request_by_request(warm, topk, n_draft):
    target, draft = warm["target"], warm["drafts"]["aligned"]
    with serve(target, draft, SERVED, K=K, variant="new", topk=topk, num_draft_tokens=n_draft) as url:
        cmp = compare(url, target, draft, warm["rows"], temperature=T, top_p=0.95, top_k=20, progress=False)
        bodies = list(url.state.requests)
    sp = bodies[0]["sampling_params"]
    assert sp == {"temperature": T, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0,
                  "frequency_penalty": 0.0, "presence_penalty": 0.0, "max_new_tokens": RESPONSE}
    assert all(b["sampling_params"] == sp for b in bodies)
    st = cmp.setting
    assert (st.temperature, st.top_p, st.top_k) == (T, 0.95, 20) and "temperature 0.7" in cmp.summary()
    assert cmp.to_dict()["sampling_params"]["temperature"] == T
    assert any(s.output_ids != [s.prompt_ids[-1]] * RESPONSE for s in cmp.samples)   # not the greedy output
    assert cmp.statuses()[SERVED] == ["identical"] * 12, cmp.summary()
    assert cmp.verdict_code == "match-trained" and cmp.matched == SERVED, cmp.verdict
    for s, steps in zip(cmp.samples, cmp.requests[SERVED]):
        assert len(steps.accepts) == s.meta.verify_ct                                  # same verify steps
        assert s.meta.completion_tokens / s.meta.verify_ct == len(s.output_ids) / len(steps.accepts)
        assert cmp.offline_accept_length(SERVED, s.row) == pytest.approx(s.meta.accept_length)   # histogram
    assert any("temperature > 0" in n for n in cmp.notes) and not any("near-ties judged" in n for n in cmp.notes)


@pytest.mark.parametrize("topk, n_draft", [(1, None), (2, 5)])
def test_wrong_wiring_served_is_named_at_temperature(warm, topk, n_draft):
    """The demo's bug at T = 0.7: the draft is trained on MISMATCHED, the server feeds SERVED. A handful
    of requests decides it: 6 with a histogram; 12 with only spec_verify_ct (a 1-number fingerprint,
    which another wiring matches by chance more often when sampling shortens the runs it accepts)."""
    target, draft = warm["target"], warm["drafts"]["mismatched"]
    for variant, n in (("newest", 6), ("old", 12)):
        with serve(target, draft, K=K, variant=variant, topk=topk, num_draft_tokens=n_draft, seed=1) as url:
            cmp = compare(url, target, draft, warm["rows"][:n], temperature=T, progress=False)
        assert cmp.trained == MISMATCHED and cmp.mode == "per-request"
        assert cmp.statuses()[SERVED] == ["identical"] * n, (variant, cmp.summary())
        sep = cmp.separation()
        assert sep["best"] == SERVED and sep["separated"] and sep["wins"] >= 5, sep
        assert cmp.verdict_code == "match-other" and cmp.matched == SERVED, cmp.verdict
        assert cmp.verdict.startswith(f"{n}/{n} requests identical under {SERVED}")
        assert cmp.offline_accept_length(MISMATCHED) > cmp.offline_accept_length(SERVED) + 0.5


def test_seed_is_sent_per_row_and_an_older_server_without_it_is_explained(warm):
    target, draft = warm["target"], warm["drafts"]["aligned"]
    rows = warm["rows"][:3]
    runs = []
    for seed in (5, 5, 6):
        with serve(target, draft, SERVED, K=K, variant="new") as url:
            cmp = compare(url, target, draft, rows, temperature=T, seed=seed, progress=False)
            seeds = {b["input_ids"][-1]: b["sampling_params"]["sampling_seed"] for b in url.state.requests}
        assert sorted(seeds.values()) == sorted(row_seed(seed, r["_row"]) for r in rows)
        runs.append([s.output_ids for s in cmp.samples])
    assert runs[0] == runs[1] and runs[0] != runs[2]          # the stand-in honours sampling_seed
    older = tuple(f for f in SAMPLING_FIELDS if f != "sampling_seed")
    with serve(target, draft, SERVED, K=K, variant="new", sampling_fields=older) as url:
        with pytest.raises(WorkbenchError, match="unexpected keyword argument 'sampling_seed'.*run without --seed"):
            compare(url, target, draft, rows, temperature=T, seed=1, progress=False)
        cmp = compare(url, target, draft, rows, temperature=T, progress=False)        # no seed: accepted
        assert cmp.statuses()[SERVED] == ["identical"] * 3
        assert all("sampling_seed" not in b["sampling_params"] for b in url.state.requests)


def test_cli_sampling_options_are_sent_and_recorded(warm, tmp_path, capsys):
    root = warm["root"]
    with serve(warm["target"], warm["drafts"]["aligned"], SERVED, K=K, variant="renamed") as url:
        rc = main(["sglang", "compare", "--url", url, "--target", str(root / "target"), "--draft",
                   str(root / "draft-aligned"), "--data", str(root / "val.jsonl"), "--limit", "8",
                   "--temperature", "0.7", "--top-p", "0.9", "--top-k", "10", "--json", str(tmp_path / "c.json")])
        sent = url.state.requests[0]["sampling_params"]
    out = capsys.readouterr().out
    assert rc == 0, out
    assert (sent["temperature"], sent["top_p"], sent["top_k"]) == (0.7, 0.9, 10) and "sampling_seed" not in sent
    res = json.loads((tmp_path / "c.json").read_text())
    assert res["setting"]["temperature"] == 0.7 and res["setting"]["top_k"] == 10
    assert res["verdict"]["code"] == "match-trained" and "temperature 0.7, top_p 0.9, top_k 10" in out
    with pytest.raises(SystemExit):
        main(["sglang", "compare", "--url", url, "--target", "t", "--draft", "d", "--data", "x", "--top-k", "k"])
    rc = main(["sglang", "compare", "--url", "http://127.0.0.1:1", "--target", str(root / "target"), "--draft",
               str(root / "draft-aligned"), "--data", str(root / "val.jsonl"), "--top-p", "0"])
    assert rc == 2 and "--top-p 0.0: expected a number in (0, 1]" in capsys.readouterr().err


def test_docstring_examples_run():
    import doctest

    import workbench.testing.fake_sglang
    import workbench.live.fingerprint
    import workbench.live.sglang_live

    for mod in (workbench.live.fingerprint, workbench.testing.fake_sglang, workbench.live.sglang_live):
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0, mod.__name__
