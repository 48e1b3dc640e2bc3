"""Greedy agreement, the per-row `generation` key, SGLang's sampling rule, and `workbench regenerate`:
batched KV-cache generation equals the no-cache reference, HF generate and the exact speculative loop;
the live path through the fake server; resume after a kill loses nothing; bad rows give one-line errors."""

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest
import torch

from workbench import rows as data
from workbench.load.agreement import Agreement, AgreementWarning, greedy_matches, greedy_matches_reference
from workbench.cli import main
from workbench.core.errors import WorkbenchError
from workbench.live.regenerate import Job, generate_hf, generate_reference, regenerate, target_info
from workbench.core.sampling import Sampling, draw, served_probs

V, N, H = 40, 4, 32


def tiny_target(eos=None, max_pos=64, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    from workbench.model.capture import target_from_model

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=64, num_hidden_layers=N, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=max_pos, initializer_range=0.3,
                      eos_token_id=eos, bos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    return target_from_model(LlamaForCausalLM(cfg).eval())


def rows_of(prompts, responses, source="chat", **extra):
    out = []
    for i, (p, r) in enumerate(zip(prompts, responses)):
        out.append({"input_ids": p + r, "loss_mask": [0] * len(p) + [1] * len(r), "source": source, **extra})
    return out


def write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return str(path)


def random_prompts(n, lo=2, hi=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(0, V, (k,), generator=g).tolist() for k in lens]


def jobs_of(prompts, max_new):
    return [Job(i, f"row {i}", "s", p, [], [], m, {}) for i, (p, m) in enumerate(zip(prompts, max_new))]


def test_docstring_examples_run():
    import doctest

    import workbench.load.agreement
    import workbench.live.regenerate
    import workbench.core.sampling

    for mod in (workbench.load.agreement, workbench.core.sampling, workbench.live.regenerate):
        res = doctest.testmod(mod)
        assert res.attempted > 0 and res.failed == 0, mod.__name__


# ─────────────────────────────── greedy agreement ───────────────────────────────

def test_agreement_numbers_on_hand_made_data():
    # two samples, right-padded; g_{p+1} at p.  Sample 0: response x_2..x_4 = 3,4,5; greedy 3,9,5 -> 2/3.
    x = torch.tensor([[1, 2, 3, 4, 5], [7, 8, 9, 0, 0]])
    g = torch.tensor([[0, 3, 9, 5, 0], [8, 9, 1, 0, 0]])
    m = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]])
    att = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    a = Agreement.from_tensors(x, g, m, rows=[0, 1], sources=["code", "prose"], attention_mask=att)
    assert a.n_match.tolist() == [2, 2] and a.n_tokens.tolist() == [3, 2]
    assert a.share == pytest.approx(4 / 5)
    assert a.per_sample.tolist() == pytest.approx([2 / 3, 1.0])
    by = a.by_source()
    assert by["code"]["share"] == pytest.approx(2 / 3) and by["prose"]["share"] == 1.0
    assert by["(all)"]["tokens"] == 5 and by["(all)"]["min_sample"] == pytest.approx(2 / 3)
    assert list(a.to_frame().columns) == ["row", "source", "tokens", "matches", "share"]
    assert json.dumps(a.to_dict())                                  # JSON-ready


def test_agreement_fast_path_equals_reference():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 3, (6, 30), generator=g)
    nt = torch.randint(0, 3, (6, 30), generator=g)
    m = torch.randint(0, 2, (6, 30), generator=g)
    n, d = greedy_matches(x, nt, m)
    for b in range(6):
        assert (int(n[b]), int(d[b])) == greedy_matches_reference(x[b].tolist(), nt[b].tolist(), m[b].tolist())


def test_agreement_warns_once_in_plain_words_and_not_for_sampled_data():
    x, g, m = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[2, 0, 0, 0]]), torch.tensor([[0, 1, 1, 1]])
    a = Agreement.from_tensors(x, g, m, rows=[0], sources=["web"])
    assert a.share == pytest.approx(1 / 3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        msg = a.check()
        a.check()                                                   # once per result
    assert len([x for x in w if issubclass(x.category, AgreementWarning)]) == 1
    assert "greedy agreement 0.333 < 0.98" in msg
    assert "teacher-forced acceptance on your data" in msg
    assert "decode path is an approximation" in msg
    assert "workbench regenerate" in msg
    assert a.message(greedy=False) is None                          # sampling requested: not judged here
    sampled = Agreement.from_tensors(x, g, m, rows=[0], sources=["web"],
                                     generations=[{"by": "target", "temperature": 0.7}])
    assert sampled.message() is None                                # judged by its recorded settings
    greedy_rec = Agreement.from_tensors(x, g, m, rows=[0], sources=["web"], generations=[{"by": "target", "temperature": 0}])
    assert greedy_rec.message() is not None
    ok = Agreement.from_tensors(x, torch.tensor([[2, 3, 4, 0]]), m, rows=[0], sources=["web"])
    assert ok.share == 1.0 and ok.check() is None


def test_agreement_from_the_capture_pass_needs_no_extra_forward():
    from workbench.model.capture import count_forwards, extract

    target = tiny_target()
    prompts = random_prompts(4)
    greedy = [generate_reference(target, p, 6).tokens for p in prompts]
    foreign = [[(t + 1) % V for t in r] for r in greedy]
    rows = rows_of(prompts, greedy, "greedy") + rows_of(prompts, foreign, "foreign")
    with count_forwards(target.model) as c:
        batches = list(extract(target, rows, ["L1"], batch_size=4, progress=False))
        a = Agreement.from_batches(batches)
    assert c["calls"] == len(batches)
    by = a.by_source()
    assert by["greedy"]["share"] == 1.0 and by["foreign"]["share"] == 0.0


# ─────────────────────────────── the generation key ───────────────────────────────

def test_generation_key_is_validated_and_shown_by_inspect(tmp_path, capsys):
    rows = rows_of([[1, 2]] * 3, [[3, 4]] * 3, "a")
    rows[0]["generation"] = {"by": "target", "temperature": 0.0, "top_p": 1.0, "top_k": -1, "seed": None, "dtype": "fp32"}
    rows[1]["generation"] = {"by": "server", "temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 3}
    ins = data.load(rows).inspect()
    assert ins.validation.ok
    assert ins.generation == {"a": {"target, greedy": 1, "server, T=0.7 top_p=0.9 top_k=20 seed=3": 1, "not recorded": 1}}
    assert "how the responses were made" in str(ins) and "server, T=0.7" in str(ins)
    bad = rows_of([[1, 2]], [[3]], "a", generation={"by": "target", "top_p": 1.5})
    with pytest.raises(WorkbenchError, match=r"row 0: generation.top_p: got float 1.5 \(expected a number in \(0, 1\]\)"):
        data.load(bad).rows()
    with pytest.raises(WorkbenchError, match="generation.by: missing"):
        data.load(rows_of([[1, 2]], [[3]], "a", generation={"temperature": 0})).rows()
    with pytest.raises(WorkbenchError, match="generation: got str"):
        data.load(rows_of([[1, 2]], [[3]], "a", generation="greedy")).rows()
    path = write(tmp_path / "d.jsonl", rows)
    assert main(["inspect", path]) == 0
    assert "server, T=0.7 top_p=0.9 top_k=20 seed=3 (1 rows)" in capsys.readouterr().out
    assert main(["inspect", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["generation"]["a"]["target, greedy"] == 1


# ─────────────────────────────── SGLang's sampling rule ───────────────────────────────

def _sglang_torch(probs, top_k, top_p):
    """SGLang's top_k_top_p_min_p_sampling_from_probs_torch filter (min_p off), written as it is there."""
    p_sort, idx = probs.sort(dim=-1, descending=True)
    p_sum = torch.cumsum(p_sort, dim=-1)
    top_ks, top_ps = torch.full((probs.shape[0],), top_k), torch.full((probs.shape[0],), top_p)
    p_sort[torch.arange(0, probs.shape[-1]).view(1, -1) >= top_ks.view(-1, 1)] = 0.0
    p_sort[(p_sum - p_sort) > top_ps.view(-1, 1)] = 0.0
    out = torch.zeros_like(probs).scatter_(-1, idx, p_sort)
    return out / out.sum(-1, keepdim=True)


def test_served_distribution_is_sglangs_and_draws_follow_it():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 12, generator=g) * 2
    for t, k, p in [(1.0, -1, 1.0), (0.7, 5, 1.0), (1.3, -1, 0.8), (0.6, 4, 0.7)]:
        s = Sampling(temperature=t, top_k=k, top_p=p)
        ref = _sglang_torch(torch.softmax(logits / t, -1), k if k > 0 else 1 << 30, p)
        assert torch.allclose(served_probs(logits, s), ref, atol=1e-6)
    s = Sampling(temperature=0.8, top_k=6, top_p=0.9)
    probs = served_probs(logits[:1], s)[0]
    n = 20000
    u = torch.rand(n, generator=g)
    toks = draw(logits[:1].expand(n, -1), s, u)
    freq = torch.bincount(toks, minlength=12).double() / n
    assert (freq[probs == 0] == 0).all()                                          # never a cut token
    assert torch.allclose(freq, probs.double(), atol=4 * (0.25 / n) ** 0.5)       # within 4 standard errors
    assert draw(logits, Sampling(), torch.zeros(3)).tolist() == logits.argmax(-1).tolist()


def test_sampling_settings_are_checked():
    for bad, match in [(dict(temperature=-1), "--temperature"), (dict(top_p=0), "--top-p"), (dict(top_k=0), "--top-k"),
                       (dict(seed=-2), "--seed")]:
        with pytest.raises(WorkbenchError, match=match):
            Sampling(**bad)


# ─────────────────────────────── HF generation ───────────────────────────────

def test_batched_kv_generation_equals_the_no_cache_reference_and_hf_generate():
    target = tiny_target(eos=5)
    info = target_info(target)
    prompts = random_prompts(5)
    max_new = [3, 9, 1, 8, 10]
    got = generate_hf(target, jobs_of(prompts, max_new), eos_ids=info.eos_ids, batch_size=3, agreement=False)
    one = generate_hf(target, jobs_of(prompts, max_new), eos_ids=info.eos_ids, batch_size=1, agreement=False)
    ended = 0
    for p, m, a, b in zip(prompts, max_new, got, one):
        ref = generate_reference(target, p, m, eos_ids=info.eos_ids)
        assert a.tokens == ref.tokens == b.tokens and a.finish == ref.finish
        ended += a.finish == "eos"
        hf = target.model.generate(torch.tensor([p]), max_new_tokens=m, do_sample=False, eos_token_id=5,
                                   pad_token_id=0, attention_mask=torch.ones(1, len(p), dtype=torch.long))
        assert a.tokens == hf[0, len(p):].tolist()
    no_eos = generate_hf(target, jobs_of(prompts, max_new), eos_ids=info.eos_ids, ignore_eos=True, batch_size=4)
    assert [len(g.tokens) for g in no_eos] == max_new and all(g.finish == "length" for g in no_eos)


def test_lean_prefill_agrees_with_the_plain_one():
    # the agreement prefill: argmax of lm_head over the hooked final norm, chunked, vs the model's own logits
    target = tiny_target(eos=5)
    prompts = [[3]] + random_prompts(5)
    olds = [[(t + 1) % V if j % 3 == 2 else t for j, t in enumerate(generate_reference(target, p, k).tokens)]
            for p, k in zip(prompts, [4, 9, 1, 6, 12, 3])]                    # greedy, every third token changed
    jobs = [Job(i, f"row {i}", "s", p, o, [1] * len(o), 7, {}) for i, (p, o) in enumerate(zip(prompts, olds))]
    jobs[2].old_mask = [0]
    for s in (Sampling(), Sampling(temperature=0.8, seed=3)):
        lean = generate_hf(target, jobs, eos_ids={5}, batch_size=3, sampling=s, lean=True)
        plain = generate_hf(target, jobs, eos_ids={5}, batch_size=3, sampling=s, lean=False)
        none = generate_hf(target, jobs, eos_ids={5}, batch_size=3, sampling=s, agreement=False)
        assert [(x.tokens, x.finish, x.matches, x.counted) for x in lean] == \
            [(x.tokens, x.finish, x.matches, x.counted) for x in plain]
        assert [x.tokens for x in lean] == [x.tokens for x in none]
    assert [x.counted for x in lean] == [4, 9, 0, 6, 12, 3] and any(x.matches for x in lean)


def test_sampled_generation_is_seeded_reproducible_and_independent_of_batching():
    target = tiny_target()
    prompts = random_prompts(5)
    s = Sampling(temperature=0.9, top_k=10, top_p=0.95, seed=7)
    a = generate_hf(target, jobs_of(prompts, [8] * 5), sampling=s, batch_size=5, agreement=False)
    b = generate_hf(target, jobs_of(prompts, [8] * 5), sampling=s, batch_size=2, agreement=False)
    assert [x.tokens for x in a] == [x.tokens for x in b]
    for i, p in enumerate(prompts):
        assert generate_reference(target, p, 8, sampling=s, row=i).tokens == a[i].tokens
    c = generate_hf(target, jobs_of(prompts, [8] * 5), sampling=Sampling(0.9, 0.95, 10, seed=8), agreement=False)
    assert [x.tokens for x in c] != [x.tokens for x in a]
    greedy = generate_hf(target, jobs_of(prompts, [8] * 5), agreement=False)
    assert [x.tokens for x in a] != [x.tokens for x in greedy]


def _draft_for(target):
    from workbench.model.draft import Eagle3Draft, new_draft_config

    torch.manual_seed(3)
    return Eagle3Draft.from_config(new_draft_config(target.config, layer_ids=[0, 1, 3]), target.embed_weight()).eval()


def test_regenerated_greedy_responses_equal_the_exact_speculative_loop(tmp_path):
    from workbench.simulate.exact import exact_decode

    target = tiny_target(eos=5)
    draft = _draft_for(target)
    prompts = random_prompts(3, lo=3, hi=6)
    foreign = [[(7 * i + j) % V for j in range(8)] for i in range(3)]
    src = write(tmp_path / "in.jsonl", rows_of(prompts, foreign))
    exact = [exact_decode(target, draft, p, "L0,L1,L3", 3, 8)[0] for p in prompts]
    regenerate(target, src, tmp_path / "out.jsonl", ignore_eos=True, batch_size=2, progress=False)
    for p, r, gen in zip(prompts, data.load(tmp_path / "out.jsonl").rows(), exact):
        assert r["input_ids"][len(p):] == gen
    # stopping at EOS: the same tokens up to and with the first EOS
    res = regenerate(target, src, tmp_path / "eos.jsonl", batch_size=2, progress=False)
    for p, r, gen in zip(prompts, data.load(tmp_path / "eos.jsonl").rows(), exact):
        cut = gen.index(5) + 1 if 5 in gen else len(gen)
        assert r["input_ids"][len(p):] == gen[:cut]
        assert r["generation"]["finish"] == ("eos" if 5 in gen else "length")
    assert res.complete


# ─────────────────────────────── the file: rows, summary, agreement before ───────────────────────────────

def test_regenerate_rewrites_rows_consistently_and_summarises(tmp_path):
    target = tiny_target()
    prompts = random_prompts(6)
    greedy = [generate_reference(target, p, 7).tokens for p in prompts]
    rows = rows_of(prompts[:3], greedy[:3], "own") + rows_of(prompts[3:], [[1, 2, 3]] * 3, "web", note="keep me")
    rows[3]["labels"] = [-100] * len(prompts[3]) + [1, 2, 3]                     # token-aligned: stale afterwards
    src = write(tmp_path / "in.jsonl", rows)
    res = regenerate(target, src, tmp_path / "out.jsonl", progress=False)
    out = data.load(tmp_path / "out.jsonl").rows()
    assert len(out) == 6 and data.load(tmp_path / "out.jsonl").validate().ok
    for i, (r, p) in enumerate(zip(out, prompts)):
        n_new = 7 if i < 3 else 3                                                # default M: the old length
        assert r["input_ids"][:len(p)] == p and r["n_prompt_tokens"] == len(p)
        assert r["n_response_tokens"] == n_new and r["seq_len"] == len(p) + n_new
        assert r["loss_mask"] == [0] * len(p) + [1] * n_new
        assert r["input_ids"][len(p):] == generate_reference(target, p, n_new).tokens
        g = r["generation"]
        assert g["by"] == "target" and g["temperature"] == 0.0 and g["dtype"] == "fp32" and g["input_row"] == i
        assert g["replaced"]["response_tokens"] == n_new
    assert out[0]["input_ids"] == rows[0]["input_ids"]                           # own greedy output: unchanged
    assert [r["source"] for r in out] == ["own"] * 3 + ["web"] * 3 and out[3]["note"] == "keep me"
    assert "labels" not in out[3] and res.dropped_keys == {"labels": 1}
    by = res.by_source()
    assert by["own"]["agreement_before"] == 1.0 and by["web"]["agreement_before"] < 0.98
    text = res.summary()
    assert "agreement before" in text and "own" in text and "dropped token-aligned keys" in text
    # agreement before equals the capture pass's agreement on the old data
    from workbench.model.capture import extract

    a = Agreement.from_batches(extract(target, rows, ["L1"], progress=False))
    assert by["web"]["agreement_before"] == pytest.approx(a.by_source()["web"]["share"])
    # a re-run finds OUT complete: nothing to do
    again = regenerate(target, src, tmp_path / "out.jsonl", progress=False)
    assert again.n_new == 0 and again.n_resumed == 6 and again.complete


def test_max_new_tokens_and_max_positions(tmp_path):
    target = tiny_target(max_pos=16)
    rows = rows_of([[1, 2, 3], list(range(10)), list(range(16))], [[4], [1, 2], [3]])
    src = write(tmp_path / "in.jsonl", rows)
    with pytest.raises(WorkbenchError, match=r"in.jsonl:3: prompt fills the target's max positions \(16 tokens >= 16\)"):
        regenerate(target, src, tmp_path / "a.jsonl", max_new_tokens=20, progress=False)
    res = regenerate(target, src, tmp_path / "b.jsonl", max_new_tokens=20, on_error="skip", ignore_eos=True,
                     progress=False)
    out = data.load(tmp_path / "b.jsonl").rows()
    assert [r["seq_len"] for r in out] == [16, 16]                                # capped at max positions
    assert res.skipped == {"prompt_too_long": 1} and res.n_capped == 2
    assert out[0]["generation"]["max_new_tokens"] == 20


def test_prompt_less_and_bad_rows(tmp_path, capsys):
    target = tiny_target()
    rows = [{"input_ids": [1, 2, 3], "loss_mask": [1, 1, 1]}] + rows_of([[1, 2]], [[3, 4]])
    src = write(tmp_path / "in.jsonl", rows)
    with pytest.raises(WorkbenchError, match=r"in.jsonl:1: no prompt \(loss_mask starts with 1\); cannot regenerate"):
        regenerate(target, src, tmp_path / "a.jsonl", progress=False)
    res = regenerate(target, src, tmp_path / "b.jsonl", on_error="skip", progress=False)
    assert res.skipped == {"no_prompt": 1} and res.n_rows == 1
    with open(src, "a") as f:
        f.write("{not json\n")
    with pytest.warns(UserWarning, match="skipped 1 bad rows"):
        res = regenerate(target, src, tmp_path / "c.jsonl", on_error="skip", progress=False)
    assert res.skipped == {"no_prompt": 1, "bad_row": 1}
    with pytest.raises(WorkbenchError, match="same file as --data"):
        regenerate(target, src, src, progress=False)
    with pytest.raises(WorkbenchError, match="nope.jsonl: no such file"):
        regenerate(target, tmp_path / "nope.jsonl", tmp_path / "d.jsonl", progress=False)


# ─────────────────────────────── interruption ───────────────────────────────

def test_interrupted_run_resumes_and_loses_nothing(tmp_path):
    from workbench.model.capture import count_forwards

    target = tiny_target()
    prompts = random_prompts(9)
    src = write(tmp_path / "in.jsonl", rows_of(prompts, [[1, 2, 3, 4]] * 9))
    full = regenerate(target, src, tmp_path / "full.jsonl", batch_size=2, flush_every=2, progress=False)
    assert full.n_rows == 9

    class Killed(Exception):
        pass

    calls = {"n": 0}

    def boom(module, args, kwargs):
        calls["n"] += 1
        if calls["n"] > 12:                       # part-way through the third group of rows
            raise Killed()

    h = target.model.register_forward_pre_hook(boom, with_kwargs=True)
    with pytest.raises(Killed):
        regenerate(target, src, tmp_path / "out.jsonl", batch_size=2, flush_every=2, progress=False)
    h.remove()
    assert not (tmp_path / "out.jsonl").exists()                                  # OUT appears only complete
    part = (tmp_path / "out.jsonl.part").read_text().splitlines()
    assert 0 < len(part) < 9
    with open(tmp_path / "out.jsonl.part", "a") as f:                             # a torn last line
        f.write('{"input_ids": [1, 2')
    with count_forwards(target.model) as c:
        res = regenerate(target, src, tmp_path / "out.jsonl", batch_size=2, flush_every=2, progress=False)
    assert res.n_resumed == len(part) and res.n_new == 9 - len(part) and c["samples"] > 0
    assert (tmp_path / "out.jsonl").read_text() == (tmp_path / "full.jsonl").read_text()
    assert not (tmp_path / "out.jsonl.part").exists() and not (tmp_path / "out.jsonl.part.json").exists()
    with pytest.raises(WorkbenchError, match="made with other settings"):
        regenerate(target, src, tmp_path / "out.jsonl", max_new_tokens=3, progress=False)


def test_resume_after_sigkill_of_the_cli(tmp_path):
    target = tiny_target()
    target.model.save_pretrained(tmp_path / "target")
    n = 30
    prompts = random_prompts(n, lo=10, hi=30)
    src = write(tmp_path / "in.jsonl", rows_of(prompts, [[1] * 16] * n))
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "workbench", "regenerate", "--target", str(tmp_path / "target"), "--data", src,
           "--out", str(out), "--batch-size", "1", "--flush-every", "1", "--quiet"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd()] + sys.path)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    part = tmp_path / "out.jsonl.part"
    t0 = time.time()
    while time.time() - t0 < 120 and proc.poll() is None:
        if part.exists() and part.read_text().count("\n") >= 2:
            break
        time.sleep(0.01)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)                                             # no cleanup runs
    proc.wait()
    n_before = part.read_text().count("\n")
    assert 2 <= n_before < n and not out.exists()
    rc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert rc.returncode == 0, rc.stderr[-2000:]
    assert f"({n - n_before} new, {n_before} already written)" in rc.stdout
    done = data.load(out).rows()
    assert [r["generation"]["input_row"] for r in done] == list(range(n))
    ref = generate_hf(target, jobs_of(prompts, [16] * n), agreement=False)
    assert [r["input_ids"][len(p):] for r, p in zip(done, prompts)] == [g.tokens for g in ref]


# ─────────────────────────────── the live server path ───────────────────────────────

def test_server_path_equals_the_hf_path_and_sends_explicit_sampling(tmp_path):
    from workbench.testing.fake_sglang import exact_generator, serve

    target = tiny_target(eos=5)
    draft = _draft_for(target)
    target.model.save_pretrained(tmp_path / "target")
    prompts = random_prompts(6, lo=3)
    src = write(tmp_path / "in.jsonl", rows_of(prompts, [[1] * 8] * 6))
    hf = regenerate(target, src, tmp_path / "hf.jsonl", ignore_eos=True, progress=False)
    with serve(generate=exact_generator(target, draft, "L0,L1,L3", 3), faults=[503]) as url:
        live = regenerate(str(tmp_path / "target"), src, tmp_path / "live.jsonl", url=url, ignore_eos=True,
                          concurrency=3, progress=False)
        sent = url.state.requests
    a, b = data.load(tmp_path / "hf.jsonl").rows(), data.load(tmp_path / "live.jsonl").rows()
    assert [r["input_ids"] for r in a] == [r["input_ids"] for r in b]
    assert b[0]["generation"]["by"] == "server" and b[0]["generation"]["model"] == "fake-target"
    assert live.n_rows == 6 and live.by_source()["chat"]["agreement_before"] is None
    sp = sent[0]["sampling_params"]
    assert sp["temperature"] == 0 and sp["top_p"] == 1.0 and sp["top_k"] == -1 and sp["ignore_eos"] is True
    assert sp["max_new_tokens"] == 8 and sp["min_p"] == 0.0 and sp["repetition_penalty"] == 1.0

    # sampled through a server that samples with SGLang's rule: settings sent and recorded, seeds per row
    def sampler(prompt, n, sampling_params):
        s = Sampling(sampling_params["temperature"], sampling_params["top_p"], sampling_params["top_k"])
        g = torch.Generator().manual_seed(sampling_params["sampling_seed"])
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(n):
                logits = target.model(torch.tensor([ids])).logits[:, -1]
                ids.append(int(draw(logits, s, torch.rand(1, generator=g))[0]))
        return ids[len(prompt):], []

    s = Sampling(temperature=0.8, top_p=0.9, top_k=12, seed=4)
    with serve(generate=sampler) as url:
        r1 = regenerate(str(tmp_path / "target"), src, tmp_path / "s1.jsonl", url=url, sampling=s, ignore_eos=True,
                        progress=False)
        sp = url.state.requests[0]["sampling_params"]
    assert (sp["temperature"], sp["top_p"], sp["top_k"]) == (0.8, 0.9, 12) and isinstance(sp["sampling_seed"], int)
    rows = data.load(tmp_path / "s1.jsonl").rows()
    assert rows[0]["generation"]["temperature"] == 0.8 and rows[0]["generation"]["seed"] == 4
    assert r1.n_rows == 6


def test_vllm_path_equals_the_hf_path_token_for_token(tmp_path, capsys):
    """`workbench regenerate --server vllm --url URL`: /v1/completions on token ids through the vLLM stand-in (which
    stops at the target's EOS like vLLM, unless ignore_eos) gives the HF path's rows, EOS cut and finish included."""
    from workbench.testing.fake_vllm import serve

    prompts = random_prompts(8, lo=3)
    greedy = [g.tokens for g in generate_hf(tiny_target(max_pos=128), jobs_of(prompts, [12] * 8), agreement=False)]
    eos = next(t for t in range(V) if 2 <= sum(t in g[1:] for g in greedy) < 8)     # EOS inside some outputs
    target = tiny_target(eos=eos, max_pos=128)                                      # the same weights
    draft = _draft_for(target)
    target.model.save_pretrained(tmp_path / "target")
    src = write(tmp_path / "in.jsonl", rows_of(prompts, [[1] * 12] * 8))
    with serve(target, draft, K=3) as url:
        for ignore in (False, True):
            tag = "ign" if ignore else "eos"
            hf = regenerate(target, src, tmp_path / f"hf-{tag}.jsonl", ignore_eos=ignore, progress=False)
            rc = main(["regenerate", "--target", str(tmp_path / "target"), "--data", src, "--out",
                       str(tmp_path / f"vllm-{tag}.jsonl"), "--server", "vllm", "--url", url, "--quiet"]
                      + (["--ignore-eos"] if ignore else []))
            assert rc == 0, capsys.readouterr().err
            a, b = data.load(tmp_path / f"hf-{tag}.jsonl").rows(), data.load(tmp_path / f"vllm-{tag}.jsonl").rows()
            assert [r["input_ids"] for r in b] == [r["input_ids"] for r in a]
            assert [r["generation"]["finish"] for r in b] == [r["generation"]["finish"] for r in a]
            if not ignore:
                assert {r["generation"]["finish"] for r in a} == {"eos", "length"}      # both endings are covered
            g = b[0]["generation"]
            assert (g["by"], g["model"], g["server"]) == ("server", "fake-target", "vllm") and hf.n_rows == 8
        sent = url.state.requests[-1]
    assert sent["model"] == "fake-target" and sent["return_token_ids"] is True and sent["ignore_eos"] is True
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["min_p"]) == (0.0, 1.0, 0, 0.0)
    assert sent["max_tokens"] == 12 and "seed" not in sent and "sampling_params" not in sent

    # sampled with a seed: vLLM's names, one seed per row
    def sampler(prompt, n, sampling_params):
        return [(prompt[-1] + i) % V for i in range(n)], []

    with serve(generate=sampler, eos_ids={eos}) as url:
        regenerate(str(tmp_path / "target"), src, tmp_path / "s.jsonl", url=url, server="vllm",
                   sampling=Sampling(0.7, top_p=0.9, top_k=12, seed=4), progress=False)
        bodies = url.state.requests
    assert {(b["temperature"], b["top_p"], b["top_k"]) for b in bodies} == {(0.7, 0.9, 12)}
    assert len({b["seed"] for b in bodies}) == 8

    # a server of another vocabulary: one line naming the request
    capsys.readouterr()
    with serve(generate=lambda prompt, n: ([V + 3] * n, []), eos_ids=()) as url:
        assert main(["regenerate", "--target", str(tmp_path / "target"), "--data", src, "--out",
                     str(tmp_path / "bad.jsonl"), "--server", "vllm", "--url", url, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "/v1/completions (" in err and f"token id {V + 3} outside the target vocab 0..{V - 1}" in err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


# ─────────────────────────────── the CLI ───────────────────────────────

def test_cli_regenerate(tmp_path, capsys):
    target = tiny_target()
    target.model.save_pretrained(tmp_path / "target")
    src = write(tmp_path / "in.jsonl", rows_of(random_prompts(3), [[1, 2, 3]] * 3, "web"))
    rc = main(["regenerate", "--target", str(tmp_path / "target"), "--data", src, "--out", str(tmp_path / "o.jsonl"),
               "--temperature", "0.7", "--top-k", "5", "--seed", "1", "--quiet", "--json", str(tmp_path / "s.json")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "T=0.7 top_p=1 top_k=5 seed=1" in out and "web" in out
    assert json.loads((tmp_path / "s.json").read_text())["by_source"]["web"]["rows"] == 3
    assert main(["regenerate", "--target", str(tmp_path / "target"), "--data", src, "--out", str(tmp_path / "x.jsonl"),
                 "--top-p", "2", "--quiet"]) == 2
    assert "error: --top-p 2.0" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "o.jsonl")]) == 0
    assert "target, T=0.7 top_k=5 seed=1 (3 rows)" in capsys.readouterr().out


# ─────────────────────────────── on the demo ───────────────────────────────

def test_on_the_smoke_demo_regenerate_gives_back_its_greedy_data_and_the_exact_loops_tokens(smoke_demo, tmp_path):
    from workbench.model import capture
    from workbench.simulate.exact import exact_decode
    from workbench.demo.build import read_manifest
    from workbench.model.checkpoint import load_draft

    target = capture.load_target(smoke_demo / "target", progress=False)
    res = regenerate(target, smoke_demo / "val.jsonl", tmp_path / "regen.jsonl", ignore_eos=True, limit=3,
                     progress=False)
    old = data.load(smoke_demo / "val.jsonl").rows(3)
    new = data.load(tmp_path / "regen.jsonl").rows()
    assert [r["input_ids"] for r in new] == [r["input_ids"] for r in old]        # the demo's data is target-greedy
    assert all(v["agreement_before"] == 1.0 for v in res.by_source().values())
    draft = load_draft(smoke_demo / "draft-aligned", target)
    spec = ",".join(read_manifest(smoke_demo)["taps"]["aligned"])
    r = new[0]
    gen, _ = exact_decode(target, draft, r["input_ids"][:r["n_prompt_tokens"]], spec, 3, r["n_response_tokens"])
    assert gen == r["input_ids"][r["n_prompt_tokens"]:]
