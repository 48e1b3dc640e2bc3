"""`workbench vllm compare`: a live (loopback stand-in) vLLM server against the offline estimator.

The world is test_sglang_live's: a target that greedily repeats the current token and drafts built for
given taps. The draft used here has nested ids [1, 3, 4] and was trained on L1,L3,L4 (SGLang's reading:
id k = L{k}); vLLM 0.32 reads the same ids as L0,L2,L3 (id k = input of layer k), and the requests tell
the two apart.
"""

import json

import pytest
from test_sglang_live import SERVED, K, _build

from workbench.cli import main
from workbench.core.errors import WorkbenchError
from workbench.live.comparison import counter_histogram
from workbench.testing.fake_vllm import serve, spec_decoding
from workbench.live.vllm_live import (
    compare,
    detect_k,
    parse_spec_decoding,
    request_params,
)

VLLM_READING = "L0,L2,L3"      # what vLLM 0.32 (V1 runner) feeds for nested ids [1, 3, 4]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return _build(tmp_path_factory)


def _compare(url, world, **kw):
    return compare(url, world["target"], world["drafts"]["aligned"], world["rows"], progress=False,
                   **{"probe": 3, **kw})


def test_per_request_verdict_names_the_served_wiring(world):
    with serve(world["target"], world["drafts"]["aligned"], K=K) as url:
        cmp = _compare(url, world)
        sent = url.state.requests
    assert url.state.wiring == VLLM_READING
    assert cmp.mode == "per-request" and cmp.counting == "v2"
    assert cmp.verdict_code == "match-other" and cmp.matched == VLLM_READING, cmp.summary()
    best = cmp.ranking()[0]
    assert best["wiring"] == VLLM_READING and best["identical"] == len(world["rows"])
    # every request's offline per-step sequence is the server's own
    for s, st in zip(cmp.samples, cmp.requests[VLLM_READING]):
        assert st.accepts == s.meta.per_step_accepted
    # explicit sampling fields in vLLM's names, token ids in and out; probe requests first (T≈0, seeded)
    body = sent[-1]
    assert body["return_token_ids"] is True and body["temperature"] == 0.0 and body["top_k"] == 0
    assert {"top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"} <= set(body)
    assert [b["temperature"] for b in sent[:3]] == [0.01] * 3 and all("seed" in b for b in sent[:3])
    g = cmp.greedy_check
    assert g["greedy"]["mismatch"] == 0 and g["near_zero"]["mismatch"] == 0
    # the pooled /metrics counters agree on their own
    assert cmp.aggregate["num_drafts"] == sum(len(s.meta.per_step_accepted) for s in cmp.samples)
    assert cmp.metrics_verdict()[:2] == ("match-other", VLLM_READING)
    assert "vllm lint" not in cmp.verdict and "live vLLM server" in cmp.summary()
    from workbench.report.plots import (  # the same figures
        live_comparison,
        live_histograms,
        live_requests,
    )

    assert f"the vLLM server feeds {VLLM_READING}, as vLLM" in live_comparison(cmp).axes[0].get_title()
    assert len(live_histograms(cmp).axes[0].patches) == 3 * (K + 1) and live_requests(cmp).axes


def test_trained_wiring_served_is_match_trained_and_json_layout(world, tmp_path, capsys):
    root = world["root"]
    with serve(world["target"], world["drafts"]["aligned"], SERVED, K=K) as url:
        rc = main(["vllm", "compare", "--url", url, "--target", str(root / "target"), "--draft",
                   str(root / "draft-aligned"), "--data", str(root / "val.jsonl"), "--probe", "2",
                   "--json", str(tmp_path / "cmp.json")])
    out = capsys.readouterr().out
    assert rc == 0 and "verdict:" in out
    d = json.loads((tmp_path / "cmp.json").read_text())
    assert {"schema_version", "verdict", "samples", "totals", "metrics", "engine"} <= set(d)
    assert d["verdict"]["code"] == "match-trained" and d["verdict"]["wiring"] == SERVED
    assert d["engine"] == "vllm" and d["setting"]["engine"] == "vllm"
    s0 = d["samples"][0]
    assert s0["per_step_accepted"] == s0["offline_per_step_accepted"][SERVED]
    m = d["metrics"]
    assert {"num_drafts", "num_accepted_tokens", "num_accepted_tokens_per_pos", "note", "fit", "verdict"} <= set(m)
    assert "no other traffic" in m["note"] and m["verdict"]["wiring"] == SERVED
    assert d["totals"][0]["what"] == "live"


def test_metrics_only_decides_from_the_counters(world):
    with serve(world["target"], world["drafts"]["aligned"], K=K) as url:
        cmp = _compare(url, world, metrics_only=True, probe=0)
    assert cmp.mode == "aggregate" and cmp.statuses() == {}
    assert cmp.verdict_code == "match-other" and cmp.matched == VLLM_READING, cmp.verdict
    assert "no other traffic" in cmp.verdict
    h = cmp.live_histogram
    assert sum(h) == cmp.aggregate["num_drafts"] and cmp.live_accept_length == pytest.approx(
        1 + cmp.aggregate["num_accepted_tokens"] / cmp.aggregate["num_drafts"])


def test_k_detection_order(world):
    from types import SimpleNamespace

    sample = SimpleNamespace(meta=parse_spec_decoding(spec_decoding([1, 2], 5, "summary")))
    counters = {"num_accepted_tokens_per_pos": [0.0] * 4}
    assert detect_k(2, [sample], counters) == (2, "--num-speculative-tokens")
    assert detect_k(None, [sample], counters)[0] == 5
    assert detect_k(None, [sample], counters, metrics_only=True)[0] == 4
    assert detect_k(None, [], counters)[1].startswith("the number of /metrics positions")
    with pytest.raises(WorkbenchError, match="pass --num-speculative-tokens K"):
        detect_k(None, [], {})
    with serve(world["target"], world["drafts"]["aligned"], K=K, detail="none", version=None) as url:
        cmp = _compare(url, world, probe=0)
    assert cmp.K == K and any("K=3 from the number of /metrics positions" in n for n in cmp.notes)
    assert cmp.mode == "aggregate" and cmp.matched == VLLM_READING and cmp.settings["version"] is None


def test_server_not_greedy_at_near_zero_temperature_names_no_wiring(world):
    with serve(world["target"], world["drafts"]["aligned"], K=K, buggy=True) as url:
        cmp = _compare(url, world, probe=4)
    assert cmp.verdict_code == "server-bug" and cmp.matched is None, cmp.summary()
    assert "not greedy at temperature 0.01" in cmp.verdict and "make vllm" in cmp.verdict
    assert cmp.to_dict()["verdict"]["wiring"] is None


def test_server_whose_greedy_output_is_not_the_targets(world):
    V = world["target"].vocab_size

    def other(prompt, n):                      # greedy, but another model's tokens
        return [(prompt[-1] + 1 + i) % V for i in range(n)], [0] * n
    with serve(generate=other, K=K) as url:
        cmp = _compare(url, world, probe=0)
    assert cmp.verdict_code == "server-not-greedy" and cmp.matched is None
    assert "not the target's greedy output" in cmp.verdict


def test_sampled_run_matches_the_served_wiring(world):
    with serve(world["target"], world["drafts"]["aligned"], K=K) as url:
        cmp = _compare(url, world, temperature=0.7, seed=1, probe=2)
        sent = url.state.requests
    assert all("seed" in b for b in sent if b["temperature"] == 0.7)
    assert cmp.verdict_code in ("match-other", "undecided") and cmp.matched in (VLLM_READING, None), cmp.summary()
    assert cmp.ranking()[0]["wiring"] == VLLM_READING


def test_parsing_and_helpers():
    m = parse_spec_decoding(spec_decoding([3, 0, 2], 3, "detailed"))
    assert m.variant == "detailed" and m.verify_ct == 3 and m.accepted_drafts == 5 and m.spec_tokens == 3
    assert parse_spec_decoding(None).variant == "none"
    with pytest.raises(WorkbenchError, match=r"metrics.speculative_decoding.num_spec_steps = -1"):
        parse_spec_decoding({"num_spec_steps": -1})
    odd = parse_spec_decoding({"num_spec_steps": 2, "per_step_accepted": [1, 2, 3]})
    assert odd.per_step_accepted is None and "set aside" in odd.note
    assert counter_histogram({"num_drafts": 4, "num_accepted_tokens_per_pos": [3, 1]}, 2) == [1, 2, 1]
    assert request_params()["top_k"] == 0


def test_unreachable_server_is_one_clear_line(world, capsys):
    from workbench.live.vllm_server import free_port

    root = world["root"]
    rc = main(["vllm", "compare", "--url", f"http://127.0.0.1:{free_port()}", "--target", str(root / "target"),
               "--draft", str(root / "draft-aligned"), "--data", str(root / "val.jsonl"), "--retries", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: cannot reach the vLLM server at http://127.0.0.1:")
