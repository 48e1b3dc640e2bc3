"""`workbench sglang compare`: a live (fake, loopback) SGLang server against the offline estimator.

The fixture builds, in memory and in a second, a target and drafts whose acceptance depends only on
the wiring: the target (attention off, big random MLPs, lm_head = its own final features) greedily
repeats the current token; each draft (attention and MLP off, fc = third tap minus second tap,
lm_head = that difference per token, normalised) drafts "the current token" when it is fed the
taps it was built for. So a server on the trained wiring accepts every draft, a server on
another wiring almost none, and the comparison has to tell which wiring the server used.
"""

import json
import socket
import threading
import time

import pytest
import torch
from conftest import save_world, tiny_draft, tiny_target

from workbench.cli import main
from workbench.core.errors import WorkbenchError
from workbench.testing.fake_sglang import serve, spec_meta
from workbench.live.sglang_live import compare, parse_meta_info, server_settings
from workbench.live.http import check_url
from workbench.live.sglang_live import Client

K = 3
PROMPT, RESPONSE = 5, 8
SERVED = "L1,L3,L4"          # what SGLang feeds a draft with eagle_config ids [1, 3, 4] (N = 8)
MISMATCHED = "embed,L1,L3"   # the demo's bug: trained on taps off by one


def _build(tmp_path_factory):
    from workbench.model import capture
    from workbench.engines.wiring import Wiring

    V, H, N = 48, 32, 8
    target = tiny_target(vocab_size=V, hidden_size=H, num_hidden_layers=N, num_key_value_heads=4,
                         max_position_embeddings=64, tie_word_embeddings=False, initializer_range=0.5)
    model = target.model
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()           # position-wise: tap = a function of the token
        final = model(torch.arange(V)[None], output_hidden_states=True).hidden_states[-1][0]
        model.lm_head.weight.copy_(final)                   # greedy next token = the current token
    feats = {}
    with torch.no_grad(), capture.tap_hooks(model, ["embed"] + [f"L{i}" for i in range(N)]) as f:
        model(torch.arange(V)[None])
        feats = {k: v[0].clone() for k, v in f.items()}

    def make(trained: str):
        d = tiny_draft(target, [1, 3, 4], trained=Wiring.parse(trained, N).taps)
        with torch.no_grad():
            d.midlayer.self_attn.o_proj.weight.zero_()
            d.midlayer.mlp.down_proj.weight.zero_()
            d.fc.weight.copy_(torch.cat([torch.zeros(H, H), -torch.eye(H), torch.eye(H)], dim=1))
            taps = Wiring.parse(trained, N).taps
            s = feats[taps[2]] - feats[taps[1]]             # what the last two layers of its wiring add
            d.lm_head.weight.copy_(s / s.pow(2).mean(-1, keepdim=True).sqrt())
        return d.eval()

    drafts = {"mismatched": make(MISMATCHED), "aligned": make(SERVED)}
    g = torch.Generator().manual_seed(1)
    rows = []
    for i in range(6):
        prompt = torch.randint(0, V, (PROMPT,), generator=g).tolist()
        ids = prompt + [prompt[-1]] * RESPONSE
        rows.append({"input_ids": ids, "loss_mask": [0] * PROMPT + [1] * RESPONSE, "seq_len": len(ids),
                     "n_prompt_tokens": PROMPT, "n_response_tokens": RESPONSE, "source": "code" if i % 2 else "prose",
                     "_row": i, "_where": f"val.jsonl:{i + 1}"})
    root = save_world(tmp_path_factory.mktemp("live"), target, {f"draft-{k}": d for k, d in drafts.items()}, rows,
                      data="val.jsonl")
    return {"target": target, "drafts": drafts, "rows": rows, "root": root}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return _build(tmp_path_factory)


# ─────────────────────────────── meta_info and server info ───────────────────────────────

def test_meta_info_variants_all_parse_to_the_same_numbers():
    out, accepts = list(range(8)), [3, 0, 2]     # prefill token + (4 + 1 + 3) = 9 -> cut to 8
    seen = {}
    for variant in ("old", "new", "renamed", "newest"):
        m = parse_meta_info(spec_meta(out, accepts, K, variant, PROMPT))
        seen[variant] = m
        assert m.variant == variant and m.verify_ct == 3 and m.completion_tokens == 8
    for variant in ("new", "renamed", "newest"):
        assert seen[variant].accepted_drafts == 5 and seen[variant].histogram == [1, 0, 1, 1]
        assert seen[variant].accept_length == pytest.approx(8 / 3)       # mean(A) + 1 = (4+1+3)/3
        assert seen[variant].reported_accept_length == pytest.approx(8 / 3)
    assert seen["old"].histogram is None and seen["old"].accept_length == pytest.approx(8 / 3)
    assert seen["old"].source_of_accept_length.startswith("completion_tokens")
    assert not parse_meta_info(spec_meta(out, accepts, K, "none", PROMPT)).has_spec


def test_meta_info_bad_fields_name_the_field():
    with pytest.raises(WorkbenchError, match=r"sample 3: meta_info.spec_verify_ct = 'x'"):
        parse_meta_info({"spec_verify_ct": "x"}, where="sample 3")
    with pytest.raises(WorkbenchError, match="spec_accept_histogram .*list of non-negative integers"):
        parse_meta_info({"spec_verify_ct": 2, "spec_accept_histogram": [1, -1]})
    odd = parse_meta_info({"spec_verify_ct": 2, "spec_accept_token_num": 2, "spec_accept_histogram": [1, 2]})
    assert odd.histogram is None and "sums to 3 but spec_verify_ct is 2" in odd.note   # set aside, not fatal
    assert odd.accept_length == pytest.approx((2 + 2) / 2)                           # from the counts instead
    with pytest.raises(WorkbenchError, match="expected a JSON object"):
        parse_meta_info([1, 2])


def test_server_info_reads_flat_and_nested_args():
    s = server_settings({"server_args": {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 5,
                                         "speculative_eagle_topk": 1}, "internal_states": [{"avg_spec_accept_length": 2}]})
    assert (s["speculative_num_steps"], s["speculative_eagle_topk"], s["avg_spec_accept_length"]) == (5, 1, 2.0)
    with pytest.raises(WorkbenchError, match="'speculative_num_steps' = 'five'"):
        server_settings({"speculative_num_steps": "five"})


def test_url_must_be_plain_http():
    assert check_url("https://host:8000/") == "https://host:8000"
    for bad in ("localhost:30000", "ftp://h", "http://h:99999", "http://u:p@h", ""):
        with pytest.raises(WorkbenchError, match="--url"):
            check_url(bad)


# ─────────────────────────────── the HTTP client ───────────────────────────────

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _echo(prompt, n):
    return [prompt[-1]] * n, [1] * ((n + 1) // 2)


def test_unreachable_server_is_one_clear_line():
    url = f"http://127.0.0.1:{_free_port()}"
    t0 = time.perf_counter()
    with pytest.raises(WorkbenchError, match=r"cannot reach the SGLang server at .*/generate: .*after 3 tries") as e:
        Client(url, retries=2, backoff=0.05, timeout=2).generate([1, 2], 4)
    assert "\n" not in str(e.value) and time.perf_counter() - t0 >= 0.15   # backoff 0.05 + 0.1 was waited


def test_retries_5xx_then_succeeds_and_4xx_fails_at_once():
    with serve(generate=_echo, K=K, faults=[503, 502]) as url:
        out, meta = Client(url, retries=2, backoff=0.01).generate([4, 9], 4)
        assert out == [9, 9, 9, 9] and meta["spec_verify_ct"] == 2
    with serve(generate=_echo, K=K, faults=[503, 503, 503]) as url:
        with pytest.raises(WorkbenchError, match="HTTP 503.*after 3 tries"):
            Client(url, retries=2, backoff=0.01).generate([4, 9], 4)
    with serve(generate=_echo, K=K, faults=[400, 400]) as url:
        with pytest.raises(WorkbenchError, match="HTTP 400.*injected fault 400"):
            Client(url, retries=5, backoff=0.01).generate([4, 9], 4)
        assert len(url.state.faults) == 1                 # no retry on a 4xx


def test_reply_that_does_not_parse():
    with serve(generate=_echo, K=K, faults=["garbage"]) as url:
        with pytest.raises(WorkbenchError, match="reply is not JSON .*'<html>not json</html>'.*SGLang server"):
            Client(url).generate([1], 2)


def test_timeout_is_retried_then_reported():
    def slow(prompt, n):
        time.sleep(0.6)
        return _echo(prompt, n)

    with serve(generate=slow, K=K) as url:
        with pytest.raises(WorkbenchError, match="timed out .*after 2 tries, timeout 0.2 s"):
            Client(url, retries=1, backoff=0.01, timeout=0.2).generate([1], 2)


def test_concurrency_limit_and_input_order():
    live, peak, lock = [0], [0], threading.Lock()

    def job(i):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.05)
        with lock:
            live[0] -= 1
        return i * i

    assert Client("http://127.0.0.1:1", concurrency=2).map(job, list(range(8))) == [i * i for i in range(8)]
    assert peak[0] == 2
    with pytest.raises(WorkbenchError, match="--concurrency 0"):
        Client("http://127.0.0.1:1", concurrency=0)


def test_non_speculative_server_is_refused(world):
    with serve(generate=_echo, K=K, variant="none") as url:
        with pytest.raises(WorkbenchError, match="speculative_algorithm is null: .*without speculative decoding"):
            compare(url, world["target"], world["drafts"]["aligned"], world["rows"], progress=False)
        from workbench.live.sglang_live import generate_samples

        with pytest.raises(WorkbenchError, match="no /generate reply has speculative fields"):
            generate_samples(Client(url), world["rows"][:2])


# ─────────────────────────────── live versus offline ───────────────────────────────

def test_mismatched_server_is_caught_and_its_wiring_recovered(world):
    target, draft = world["target"], world["drafts"]["mismatched"]
    with serve(target, draft, K=K, variant="renamed") as url:       # wiring: what SGLang would feed
        assert url.state.wiring == SERVED
        cmp = compare(url, target, draft, world["rows"], concurrency=3, progress=False)
        assert len(url.state.requests) == 6
        body = url.state.requests[0]
    assert body["sampling_params"] == {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,  # all explicit
                                       "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
                                       "max_new_tokens": RESPONSE} and len(body["input_ids"]) == PROMPT
    assert cmp.K == K and cmp.trained == MISMATCHED
    specs = [c.spec for c in cmp.candidates]
    assert specs[0] == MISMATCHED and SERVED in specs
    off = {s: cmp.offline_accept_length(s) for s in specs}
    assert off[MISMATCHED] == pytest.approx(K + 1)                   # the draft is perfect on its own taps
    assert off[SERVED] < 1.5 and cmp.live_accept_length < 1.5
    assert cmp.verdict_code == "match-other" and cmp.matched == SERVED
    assert cmp.mode == "per-request" and cmp.verdict.startswith(f"6/6 requests identical under {SERVED}; best other")
    assert "the server feeds L1,L3,L4 (sglang" in cmp.verdict and f"not the trained {MISMATCHED}" in cmp.verdict
    # the offline per-request decode reproduces the live histogram exactly (the last steps included)
    assert cmp.live_histogram[:K + 1] == [int(x) for x in cmp.offline[SERVED].decode_path["histogram"]]
    assert all(st == "identical" for st in cmp.statuses()[SERVED])
    frame = cmp.to_frame()
    assert list(frame["sample"]) == list(range(6)) and f"offline {SERVED}" in frame


def test_aligned_server_matches_trained_wiring_through_the_cli(world, tmp_path, capsys):
    root = world["root"]
    with serve(world["target"], world["drafts"]["aligned"], SERVED, K=K, variant="old") as url:
        rc = main(["sglang", "compare", "--url", url, "--target", str(root / "target"), "--draft",
                   str(root / "draft-aligned"), "--data", str(root / "val.jsonl"), "--limit", "6",
                   "--concurrency", "2", "--json", str(tmp_path / "cmp.json")])
        info = Client(url).server_info()
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"verdict: 6/6 requests identical under {SERVED}" in out and "the server feeds the trained wiring" in out
    res = json.loads((tmp_path / "cmp.json").read_text())
    assert res["verdict"]["code"] == "match-trained" and res["verdict"]["wiring"] == SERVED
    assert res["variants"] == ["old"] and len(res["samples"]) == 6 and res["schema_version"]
    assert res["mode"] == "per-request" and res["ranking"][0]["identical"] == 6 and res["separation"]["wins"] == 6
    live = res["totals"][0]
    assert live["what"] == "live" and live["accept_length"] == pytest.approx(K + 1)   # 8 tokens in 2 verify steps
    assert server_settings(info)["avg_spec_accept_length"] == pytest.approx(K + 1)


def test_cli_unreachable_server_exits_2(world, capsys):
    root = world["root"]
    rc = main(["sglang", "compare", "--url", f"http://127.0.0.1:{_free_port()}", "--target", str(root / "target"),
               "--draft", str(root / "draft-aligned"), "--data", str(root / "val.jsonl"), "--timeout", "2", "--retries", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: cannot reach the SGLang server at http://127.0.0.1:")
    assert err.count("\n") == 1


def _synthetic(live_hist, offline: dict, trained="embed,L1,L3", topk=1):
    """A Comparison from a pooled live histogram and {spec: A values on the decode path} (no server)."""
    from workbench.stats.statistics import AcceptanceResult
    from workbench.live.sglang_live import SpecMeta
    from workbench.engines.candidates import Candidate
    from workbench.live.comparison import Comparison, LiveSample

    meta = SpecMeta("new", completion_tokens=sum((a + 1) * c for a, c in enumerate(live_hist)),
                    verify_ct=sum(live_hist), histogram=list(live_hist))
    sample = LiveSample(0, "val.jsonl:1", "code", [1, 2], [3] * meta.completion_tokens, meta.completion_tokens, meta, 0.1)
    res = {s: AcceptanceResult.from_arrays(s, K, sample=[0] * len(a), t=list(range(len(a))), accepted=a,
                                           on_path=[True] * len(a)) for s, a in offline.items()}
    from workbench.engines.wiring import Wiring

    cands = [Candidate(Wiring.parse(s, 8), engines=["trained"] if s == trained else ["sglang"], trained=s == trained)
             for s in offline]
    return Comparison("http://127.0.0.1:1", K, [sample], res, cands, trained,
                      settings={"speculative_eagle_topk": topk})


def test_verdicts_below_every_wiring_no_match_and_undecided():
    c = _synthetic([10, 0, 0, 0], {"embed,L1,L3": [3, 3, 2], "L1,L3,L4": [1, 2, 1]})
    assert c.verdict_code == "below-all" and c.matched is None
    assert "live is below every wiring: live 1.00" in c.verdict and "suspect loading, vocab mapping or flags" in c.verdict
    c = _synthetic([0, 0, 0, 10], {"embed,L1,L3": [1, 1, 2], "L1,L3,L4": [0, 0, 1]}, topk=4)
    assert c.verdict_code == "no-match" and c.matched == "embed,L1,L3" and "tree drafting" in c.verdict
    c = _synthetic([5, 5, 0, 0], {"embed,L1,L3": [0, 1], "L1,L3,L4": [1, 0, 0, 1]})
    assert c.verdict_code == "undecided" and "cannot tell" in c.verdict
    c = _synthetic([0, 0, 5, 5], {"embed,L1,L3": [0, 0], "L1,L3,L4": [2, 3]})
    assert c.verdict_code == "match-other" and c.matched == "L1,L3,L4"
    assert c.live_accept_length == pytest.approx(3.5) and c.totals()[0]["histogram"] == [0, 0, 5, 5]


def test_figures_show_live_and_every_wiring():
    from workbench.report.plots import live_comparison, live_histograms

    c = _synthetic([0, 0, 5, 5], {"embed,L1,L3": [0, 0], "L1,L3,L4": [2, 3]})
    ax = live_comparison(c).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["live (3.50)", "offline embed,L1,L3 trained (1.00)", "offline L1,L3,L4 (3.50)"]
    assert "the SGLang server feeds L1,L3,L4" in ax.get_title() and "match-other" not in ax.get_title()
    assert len(live_histograms(c).axes[0].patches) == 3 * (K + 1)


# ─────────────────────────────── per-request fingerprints (issue 19) ───────────────────────────────

@pytest.mark.parametrize("topk, n_draft", [(1, None), (2, 5)])
def test_stand_in_fingerprints_identical_for_every_request_and_variant(world, topk, n_draft):
    """Chain and tree stand-ins: every request's fingerprint is reproduced exactly, every meta_info variant."""
    target, draft = world["target"], world["drafts"]["mismatched"]
    for variant in ("old", "new", "renamed", "newest"):
        with serve(target, draft, K=K, variant=variant, topk=topk, num_draft_tokens=n_draft) as url:
            cmp = compare(url, target, draft, world["rows"], progress=False)
        assert cmp.setting.shape == ("tree" if topk > 1 else "chain") and cmp.mode == "per-request"
        assert cmp.statuses()[SERVED] == ["identical"] * 6, (variant, cmp.summary())
        assert cmp.verdict_code == "match-other" and cmp.matched == SERVED, cmp.verdict
    # the summary's tables never cut a wiring or its engines (issue 22: tables and legends keep their meaning)
    for t in cmp.totals()[1:]:
        engines = "/".join(e for e in t["engines"] if e != "trained")
        assert not engines or f"[fed by {engines}]" in cmp.summary(), cmp.summary()


def test_fast_offline_requests_equal_the_exact_decode_loop(world):
    """The fast per-request decode (one target pass, parallel chains/trees) against the real loop."""
    from workbench.live.fingerprint import exact_requests, offline_requests

    target, draft = world["target"], world["drafts"]["mismatched"]
    prompts = [r["input_ids"][:PROMPT] for r in world["rows"][:3]]
    for topk, nd in ((1, None), (2, 5)):
        for spec in (SERVED, MISMATCHED):
            exact = exact_requests(target, draft, prompts, spec, steps=K, topk=topk, num_draft_tokens=nd,
                                   max_new_tokens=[RESPONSE] * 3)
            fast = offline_requests(target, draft, [(p, out) for p, (out, _) in zip(prompts, exact)], [spec],
                                    steps=K, topk=topk, num_draft_tokens=nd)[spec]
            assert [f.accepts for f in fast] == [e.accepts for _, e in exact], (topk, spec)


def test_server_outputs_differ_from_the_data_responses(world):
    """The data's responses are not what the target generates: the server's own outputs are simulated."""
    target, draft = world["target"], world["drafts"]["aligned"]
    g = torch.Generator().manual_seed(7)
    rows = []
    for i, r in enumerate(world["rows"]):
        n_resp = 4 + 2 * i                                           # other lengths, other tokens
        ids = r["input_ids"][:PROMPT] + torch.randint(0, 48, (n_resp,), generator=g).tolist()
        rows.append({**r, "input_ids": ids, "loss_mask": [0] * PROMPT + [1] * n_resp, "seq_len": len(ids),
                     "n_response_tokens": n_resp})
    with serve(target, draft, SERVED, K=K, variant="newest") as url:
        cmp = compare(url, target, draft, rows, progress=False)
    assert [len(s.output_ids) for s in cmp.samples] == [4 + 2 * i for i in range(6)]
    assert all(s.output_ids != r["input_ids"][PROMPT:] for s, r in zip(cmp.samples, rows))
    assert cmp.statuses()[SERVED] == ["identical"] * 6 and cmp.verdict_code == "match-trained"


def test_v1_last_step_counting_is_detected(world):
    target, draft = world["target"], world["drafts"]["aligned"]
    rows = [{**r, "input_ids": r["input_ids"][:-1], "loss_mask": r["loss_mask"][:-1], "seq_len": r["seq_len"] - 1,
             "n_response_tokens": RESPONSE - 1} for r in world["rows"]]      # 7 tokens: the 2nd step keeps 2 of 3
    with serve(target, draft, SERVED, K=K, variant="new", counting="v1") as url:
        cmp = compare(url, target, draft, rows, progress=False)
    assert cmp.counting == "v1" and "counts its last verify step as the v1 worker" in " ".join(cmp.notes)
    assert cmp.counting == "v1" and cmp.statuses()[SERVED] == ["identical"] * 6
    assert cmp.statuses("v2")[SERVED] != ["identical"] * 6           # 8 tokens, K=3: the last step is cut


def test_adaptive_server_is_undecided_with_the_reason(world):
    target, draft = world["target"], world["drafts"]["aligned"]
    with serve(target, draft, SERVED, K=K, variant="new", adaptive=True) as url:
        cmp = compare(url, target, draft, world["rows"], progress=False)
    assert cmp.adaptive and cmp.verdict_code == "undecided" and cmp.matched is None
    assert "--speculative-adaptive" in cmp.verdict and "restart it without" in cmp.verdict
    assert "--speculative-adaptive" in cmp.summary()


def test_server_without_per_request_fields_falls_back_to_the_weaker_aggregate(world):
    target, draft = world["target"], world["drafts"]["aligned"]
    with serve(target, draft, SERVED, K=K, variant="aggregate", endpoints=("/get_server_info",)) as url:
        cmp = compare(url, target, draft, world["rows"], progress=False)
        assert Client(url).server_info() and url.state.endpoints == ("/get_server_info",)
    assert cmp.mode == "aggregate" and cmp.settings["avg_spec_accept_length"] == pytest.approx(K + 1)
    assert cmp.verdict_code == "match-trained" and cmp.verdict.startswith("aggregate comparison (weaker")


W1, W2 = SERVED, MISMATCHED


def _two_wirings(statuses_live=True):
    """8 requests; wiring W1 makes pattern P on even and Q on odd requests, W2 the other way round:
    the same pooled aggregate, different requests. The live server is W1."""
    from workbench.live.fingerprint import server_steps
    from workbench.engines.candidates import Candidate
    from workbench.live.comparison import Comparison, LiveSample, offline_results

    P, Q = [3, 3], [1, 1, 1, 1]                                       # both emit 9 tokens
    w1 = [P if i % 2 == 0 else Q for i in range(8)]
    w2 = [Q if i % 2 == 0 else P for i in range(8)]
    samples = []
    for i, acc in enumerate(w1):
        meta = parse_meta_info(spec_meta(list(range(9)), acc, K, "new", 2))
        samples.append(LiveSample(i, f"r{i}", "", [1, 2], list(range(9)), 9, meta, 0.0))
    reqs = {W1: [server_steps(a, 9) for a in w1], W2: [server_steps(a, 9) for a in w2]}
    offline = offline_results(reqs, samples, K, None)
    from workbench.engines.wiring import Wiring

    cands = [Candidate(Wiring.parse(W1, 8), engines=["sglang"]),
             Candidate(Wiring.parse(W2, 8), engines=["trained"], trained=True)]
    return Comparison("http://127.0.0.1:1", K, samples, offline, cands, W2, requests=reqs if statuses_live else None)


def test_near_equal_aggregates_are_separated_request_by_request():
    c = _two_wirings()
    assert c.offline_accept_length(W1) == pytest.approx(c.offline_accept_length(W2))     # same aggregate
    assert c.verdict_code == "match-other" and c.matched == W1
    assert c.verdict.startswith(f"8/8 requests identical under {W1}; best other wiring {W2}: 0/8 (exact sign test 8:0")
    assert c.separation()["p"] == pytest.approx(2 / 256)
    agg = _two_wirings(statuses_live=False)                           # the aggregate cannot tell them apart
    assert agg.mode == "aggregate" and agg.verdict_code == "undecided"


def test_undecided_says_how_many_more_requests_would_separate():
    from workbench.live.fingerprint import more_to_separate, sign_test

    c = _two_wirings()
    c.samples, c.requests = c.samples[:3], {k: v[:3] for k, v in c.requests.items()}
    assert c.verdict_code == "undecided" and f"3 requests favour {W1} and 0 favour {W2}" in c.verdict
    assert f"about {more_to_separate(3, 0, 3)} more requests" in c.verdict
    assert sign_test(3, 0) == pytest.approx(0.25) and sign_test(5, 5) == 1.0


def test_one_decision_rule_the_pooled_counters_never_decide_what_the_sign_test_does_not():
    """Issue 47: where the per-request sign test does not separate two wirings, counters that fit one of them (built
    from the same steps) are quoted, and the verdict stays undecided."""
    c = _two_wirings()
    c.samples, c.requests = c.samples[:3], {k: v[:3] for k, v in c.requests.items()}
    accepts = [a for st in c.requests[W1] for a in st.accepts]
    c.aggregate = {"num_drafts": len(accepts), "num_draft_tokens": K * len(accepts),
                   "num_accepted_tokens": sum(accepts),
                   "num_accepted_tokens_per_pos": [sum(a > i for a in accepts) for i in range(K)]}
    assert sum(s.meta.verify_ct for s in c.samples) == len(accepts)          # the counters are these requests'
    assert c.counters_agree(W1, W2) is True                                   # they fit W1 and not W2 ...
    assert c.verdict_code == "undecided" and c.matched is None, c.verdict     # ... and decide nothing
    assert "count the same steps and decide nothing the sign test does not" in c.verdict


def test_an_undecided_precision_names_a_wiring_only_if_both_resolutions_do(monkeypatch):
    """Issue 47: with the served precision undecided, a wiring named at bfloat16's resolution (near-ties excused)
    is named only if float32's names it too."""
    from workbench.live.comparison import Comparison

    c = _two_wirings()
    assert not c.precision.decided                                   # no near-tie evidence in these requests
    assert c.verdict_code == "match-other" and "the same wiring wins at bfloat16's and at float32's" in c.verdict
    real = Comparison._decide_requests

    def lenient_only(self):                                          # float32's resolution finds no winner
        if self.served_dtype == "float32":
            return "undecided", None, f"undecided: 4 requests favour {W1} and 4 favour {W2}"
        return real(self)
    monkeypatch.setattr(Comparison, "_decide_requests", lenient_only)
    c = _two_wirings()
    assert (c.verdict_code, c.matched) == ("undecided", None), c.verdict
    assert "the two resolutions disagree" in c.verdict and f"4 requests favour {W1}" in c.verdict
    assert c.verdict.endswith("--served-dtype would decide")
    c = _two_wirings()
    c.served_dtype = "bfloat16"                                      # given: no second look
    assert (c.verdict_code, c.matched) == ("match-other", W1)


def test_near_tie_disagreement_is_a_tie_not_evidence():
    from workbench.live.fingerprint import near_ties, server_steps, status

    live = {"verify_ct": 2, "histogram": [0, 0, 0, 2]}
    assert status(live, server_steps([3, 3], 8), "v2") == "identical"
    assert status(live, server_steps([3, 1, 2], 8, [False, True, False]), "v2") == "tie"
    assert status(live, server_steps([3, 1, 2], 8), "v2") == "differs"
    assert status({}, server_steps([3], 4), "v2") == "n/a"
    logits = torch.tensor([[4.0, 4.0 + 1e-3, 0.0], [4.0, 3.0, 0.0]])
    assert near_ties(logits, [0, 1, 0], "bfloat16") == {0} and near_ties(logits, [0, 1, 0], "float32") == set()
    with pytest.raises(WorkbenchError, match="served dtype 'int9'"):
        near_ties(logits, [0, 1, 0], "int9")


def test_request_figure_shows_each_wiring_per_request():
    from workbench.report.plots import live_requests

    c = _two_wirings()
    ax = live_requests(c).axes[0]
    img = ax.get_images()[0].get_array()
    assert img.shape == (2, 8) and [t.get_text() for t in ax.get_yticklabels()] == [W1, f"{W2} (trained)"]
    assert (img[0] == 0).all() and (img[1] == 2).all()            # W1 identical everywhere, W2 differs
    assert f"the SGLang server feeds {W1}" in ax.get_title()
