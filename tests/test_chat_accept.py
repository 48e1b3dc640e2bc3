"""The acceptance test of issue 28: a conversation file and its `workbench prepare` output give the same accept
lengths, and both equal those of rows built here from explicit token ids, with both mask methods (the template's
generation tags, the per-turn prefix method) and in both row layouts (one row per reply, all turns in one row),
on the smoke demo's trained target and aligned draft, with the demo's own chat template in its two variants
(the default with generation tags, ``plain`` without). The reference below knows only the template's text
layout, written out by hand: each piece is encoded alone and the ids are joined."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench import rows
from workbench.load import inputs
from workbench.load.chat import chat_dataset
from workbench.load.prepare import prepare
from workbench.simulate.acceptance import accept
from workbench.simulate.exact import exact_simulate

pytestmark = pytest.mark.usefixtures("one_thread")

EOT = "<|endoftext|>"
# Templates of the tests' own for the live and resume tests below (unlike the demo's: the end-of-turn token, EOS,
# is part of each turn and of the masked reply, as in real templates).
PLAIN = ("{% for m in messages %}{{ m.role }}:\n{{ m.content }}" + EOT + "{% endfor %}"
         "{% if add_generation_prompt %}assistant:\n{% endif %}")
TAGGED = ("{% for m in messages %}{% if m.role == 'assistant' %}assistant:\n{% generation %}{{ m.content }}" + EOT +
          "{% endgeneration %}{% else %}{{ m.role }}:\n{{ m.content }}" + EOT + "{% endif %}{% endfor %}"
          "{% if add_generation_prompt %}assistant:\n{% endif %}")


def texts(demo, tok, n):
    """(user, reply) texts from the demo's val rows: its prompts and the target's greedy responses."""
    eos = tok.convert_tokens_to_ids(EOT)
    out = []
    for line in (demo / "val.jsonl").read_text().splitlines()[:n]:
        r = json.loads(line)
        p, q = r["input_ids"][:r["n_prompt_tokens"]], r["input_ids"][r["n_prompt_tokens"]:]
        user, reply = (tok.decode([x for x in ids if x != eos]).strip() for ids in (p, q))
        if user and reply:
            out.append((user, reply))
    return out


def reference(tok, conv):
    """Per-turn and all-turns rows of ``conv`` from explicit ids: the demo template's layout (``### Role:`` and a
    newline before each turn's text, a blank line between turns), each piece encoded alone, then joined."""
    enc = lambda s: tok.backend_tokenizer.encode(s, add_special_tokens=False).ids  # noqa: E731
    ids, mask, per_turn = [], [], []
    for k, m in enumerate(conv):
        head = enc(("\n\n" if k else "") + f"### {m['role'].capitalize()}:\n")
        body = enc(m["content"])
        if m["role"] == "assistant":
            per_turn.append({"input_ids": ids + head + body, "loss_mask": [0] * (len(ids) + len(head)) + [1] * len(body)})
        ids, mask = ids + head + body, mask + [0] * len(head) + [int(m["role"] == "assistant")] * len(body)
    return per_turn, {"input_ids": ids, "loss_mask": mask}


@pytest.fixture(scope="module")
def world(smoke_demo, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chat")
    tgt = inputs.target(str(smoke_demo / "target"), progress=False)
    drf = inputs.draft(str(smoke_demo / "draft-aligned"), tgt)
    pairs = texts(smoke_demo, tgt.tokenizer, 9)
    convs = [[{"role": "user", "content": u} for u, _ in pairs[i:i + 1]] + [{"role": "assistant", "content": pairs[i][1]}]
             for i in range(len(pairs))]
    convs = [convs[i] + convs[i + 1] for i in range(0, len(convs) - 1, 2)]          # two turns each
    path = tmp / "chats.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "conversations": c}) + "\n" for i, c in enumerate(convs)))
    return tmp, tgt, drf, convs, path


def run(tgt, drf, data):
    data = rows.load(data) if isinstance(data, list) else data           # explicit rows: the canonical counts
    res, _ = accept(tgt, drf, data, progress=False, batch_size=4)
    return res


@pytest.mark.parametrize("template, method", [(None, "generation"), ("plain", "prefix")])
def test_conversation_prepared_and_reference_give_the_same_accept_lengths(world, smoke_demo, template, method):
    tmp, tgt, drf, convs, path = world
    tok_dir = str(smoke_demo / "tokenizer")                          # the demo's tokenizer, its own templates
    refs = [reference(tgt.tokenizer, c) for c in convs]
    ref_per_turn = [r for per, _ in refs for r in per]
    ref_all = [a for _, a in refs]
    results = {}
    for layout in ("per-turn", "all-turns"):
        out = tmp / f"{method}-{layout}.jsonl"
        res = prepare(tok_dir, str(path), out, all_turns=layout == "all-turns", chat_template=template)
        assert dict(res.tally.methods) == {method: len(ref_per_turn) if layout == "per-turn" else len(ref_all)}
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        want = ref_per_turn if layout == "per-turn" else ref_all
        assert [(r["input_ids"], r["loss_mask"]) for r in rows] == [(w["input_ids"], w["loss_mask"]) for w in want]
        results[f"prepared {layout}"] = run(tgt, drf, str(out))
        results[f"reference {layout}"] = run(tgt, drf, want)
        results[f"conversation file {layout}"] = run(tgt, drf, chat_dataset(
            str(path), tok_dir, all_turns=layout == "all-turns", chat_template=template))     # on the fly
    if template is None:
        from workbench.demo.chat import TEMPLATES

        tgt.tokenizer.chat_template = dict(TEMPLATES)          # as built (tests below set templates of their own)
        results["conversation file, the target's tokenizer"] = run(tgt, drf, str(path))
    base = results["reference per-turn"]
    assert base.n_chains > 20 and (base.chains["accepted"] > 0).mean() > 0.2   # a real, non-trivial acceptance
    for name, r in results.items():
        assert r.accept_length == pytest.approx(base.accept_length, abs=1e-12), name
        assert r.histogram.tolist() == base.histogram.tolist(), name
        assert r.decode_path["accept_length"] == pytest.approx(base.decode_path["accept_length"], abs=1e-12), name
        assert r.decode_path["n_verify_steps"] == base.decode_path["n_verify_steps"], name
    assert results["reference all-turns"].n_samples == len(convs) < base.n_samples == 2 * len(convs)


def test_the_exact_loop_decodes_each_reply_of_an_all_turns_row(world):
    """The exact loop (a real speculative decode with the target) restarts at each reply of an all-turns row:
    the same verify steps as the per-turn rows."""
    tmp, tgt, drf, convs, _ = world
    refs = [reference(tgt.tokenizer, c) for c in convs[:2]]
    w = drf.config.get("workbench", {}).get("trained_taps")
    wiring = ",".join(w) if w else None
    per = exact_simulate(tgt, drf, rows.load([x for p, _ in refs for x in p]), wiring, K=3, progress=False)
    whole = exact_simulate(tgt, drf, rows.load([a for _, a in refs]), wiring, K=3, progress=False)
    assert per.decode_path["n_verify_steps"] == whole.decode_path["n_verify_steps"] > 4
    assert np.sort(per.chains["accepted"]).tolist() == np.sort(whole.chains["accepted"]).tolist()


def test_mt_bench_to_accept_lengths_in_two_commands(world, smoke_demo, tmp_path, capsys):
    """The demo's MT-bench-style questions.jsonl: regenerate (each second turn asked after the target's own first
    answer, rendered with the target's chat template), then accept."""
    from workbench.cli import main as cli_main

    _, tgt, _, _, _ = world
    q = smoke_demo / "questions.jsonl"
    questions = [json.loads(x) for x in q.read_text().splitlines()]
    assert len(questions) == 8 and all(len(x["turns"]) == 2 for x in questions)
    out = tmp_path / "mtbench-target.jsonl"
    assert cli_main(["regenerate", "--target", str(smoke_demo / "target"), "--data", str(q), "--out", str(out),
                     "--max-new-tokens", "12", "--quiet"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 16 and {r["generation"]["by"] for r in rows} == {"target"}
    assert [r["prepared"]["turn"] for r in rows[:2]] == [1, 3]
    assert {r["source"] for r in rows} == {x["category"] for x in questions}
    first, second = rows[0], rows[1]
    answer = tgt.tokenizer.decode(first["input_ids"][first["n_prompt_tokens"]:], skip_special_tokens=True).strip()
    prompt2 = tgt.tokenizer.decode(second["input_ids"][:second["n_prompt_tokens"]])
    assert prompt2 == (f"### User:\n{questions[0]['turns'][0]}\n\n### Assistant:\n{answer}\n\n"
                       f"### User:\n{questions[0]['turns'][1]}\n\n### Assistant:\n")
    assert all(0 < r["n_response_tokens"] <= 12 for r in rows)
    capsys.readouterr()
    assert cli_main(["accept", "--target", str(smoke_demo / "target"), "--draft", str(smoke_demo / "draft-aligned"),
                     "--data", str(out), "--quiet"]) == 0
    assert "accept length" in capsys.readouterr().out


def test_demo_chat_file_both_template_variants(smoke_demo):
    """val-chat.jsonl under the demo's two templates: the same rows and masks, the mask named by its method, and the
    replies are the target's greedy answers (up to the text round trip of a cut reply)."""
    from workbench.load import agreement

    tgt = inputs.target(str(smoke_demo / "target"), progress=False)
    lines = (smoke_demo / "val-chat.jsonl").read_text().splitlines()
    assert len(lines) >= 12 and all(len(json.loads(x)["messages"]) == 2 for x in lines)
    tagged = chat_dataset(str(smoke_demo / "val-chat.jsonl"), str(smoke_demo / "tokenizer"))
    plain = chat_dataset(str(smoke_demo / "val-chat.jsonl"), str(smoke_demo / "target"), chat_template="plain")
    assert tagged.chat["methods"] == {"generation": len(lines)} and plain.chat["methods"] == {"prefix": len(lines)}
    assert "with generation tags" in tagged.chat["template"] and "(plain)" in plain.chat["template"]
    assert [(r["input_ids"], r["loss_mask"]) for r in tagged.rows()] == [(r["input_ids"], r["loss_mask"])
                                                                          for r in plain.rows()]
    assert agreement.measure(tgt, tagged).share > 0.9


def test_regenerate_refuses_all_turns_rows():
    from workbench.core.errors import WorkbenchError
    from workbench.live.regenerate import TargetInfo, make_job

    row = {"input_ids": [1, 2, 3, 4, 5, 6], "loss_mask": [0, 1, 1, 0, 1, 1], "n_prompt_tokens": 1,
           "n_response_tokens": 5, "_row": 0, "_where": "all.jsonl:1", "source": "s",
           "prepared": {"layout": "all-turns", "replies": 2, "file": "chats.jsonl"}}
    with pytest.raises(WorkbenchError, match="all.jsonl:1: an all-turns row .* chats.jsonl"):
        make_job(row, max_new_tokens=None, info=TargetInfo("t", 8, None, frozenset()))


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_live_compare_sends_one_request_per_reply_of_an_all_turns_row(world, smoke_demo, engine):
    """A server verifies each reply in its own request: an all-turns row is sent as one request per reply (the
    history before it as prompt, the reply's length as max tokens), so `workbench sglang/vllm compare` on the
    all-turns file and on the per-turn file send the same requests, get the same outputs and the same verdict."""
    from workbench.live import sglang_live, vllm_live
    from workbench.testing import fake_sglang, fake_vllm

    tmp, tgt, _, convs, path = world
    drf = inputs.draft(str(smoke_demo / "draft-aligned"), tgt)          # its own copy: a server changes it in place
    tgt.tokenizer.chat_template = PLAIN
    tok_dir = tmp / "tok-live"
    tgt.tokenizer.save_pretrained(str(tok_dir))
    files = {}
    for layout in ("per-turn", "all-turns"):
        files[layout] = tmp / f"live-{layout}.jsonl"
        prepare(str(tok_dir), str(path), files[layout], all_turns=layout == "all-turns")
    serve, compare = ((fake_sglang.serve, sglang_live.compare) if engine == "sglang"
                      else (fake_vllm.serve, vllm_live.compare))
    kw = {} if engine == "sglang" else {"probe": 0}          # the probes are per row (and seeded by row)
    got = {}
    with serve(tgt, drf, K=3) as url:
        for layout, f in files.items():
            got[layout] = (compare(url, tgt, drf, str(f), progress=False, **kw), list(url.state.requests))
            url.state.requests.clear()
    (per, sent_per), (whole, sent_whole) = got["per-turn"], got["all-turns"]
    assert len(whole.samples) == len(per.samples) == 2 * len(convs)                 # one request per reply
    assert [s.reply for s in whole.samples] == [0, 1] * len(convs) and {s.reply for s in per.samples} == {0}
    assert [(s.prompt_ids, s.output_ids, s.max_new_tokens) for s in whole.samples] == \
        [(s.prompt_ids, s.output_ids, s.max_new_tokens) for s in per.samples]
    same = lambda sent: sorted(json.dumps(b, sort_keys=True) for b in sent)  # sent concurrently
    assert same(sent_whole) == same(sent_per)                                      # exactly the same requests
    second = whole.samples[1]                                                      # reply 2: its history is the row's
    row = json.loads(files["all-turns"].read_text().splitlines()[0])
    first_reply = row["loss_mask"].index(1)
    assert whole.samples[0].prompt_ids == row["input_ids"][:first_reply]
    assert second.prompt_ids == row["input_ids"][:len(second.prompt_ids)] and len(second.prompt_ids) > \
        first_reply + whole.samples[0].max_new_tokens and row["loss_mask"][len(second.prompt_ids) - 1] == 0
    assert (whole.verdict_code, whole.matched) == (per.verdict_code, per.matched)
    assert whole.live_accept_length == pytest.approx(per.live_accept_length, abs=1e-12)
    assert per.live_accept_length > 1.2 and per.ranking()[0]["identical"] == len(per.samples), per.summary()
    for c in per.candidates:
        assert whole.offline_accept_length(c.spec) == pytest.approx(per.offline_accept_length(c.spec), abs=1e-12)
        assert [whole.offline_accept_length(c.spec, i) for i in range(len(whole.samples))] == \
            pytest.approx([per.offline_accept_length(c.spec, i) for i in range(len(per.samples))], nan_ok=True)
    assert [d["reply"] for d in whole.per_sample()] == [0, 1] * len(convs)


def mt_bench(path, pairs):
    path.write_text("".join(json.dumps({"question_id": 81 + i, "category": "writing" if i % 2 else "coding",
                                        "turns": [u, "def shorter(self):"]}) + "\n" for i, (u, _) in enumerate(pairs)))
    return path


def test_mt_bench_through_vllm_equals_the_hf_target_and_chat_template_options(world, smoke_demo, tmp_path, capsys):
    """`workbench regenerate --server vllm --url URL --chat-template FILE --chat-template-kwargs JSON` on an MT-bench
    file: each turn asked through /v1/completions (the vLLM stand-in, stopping at EOS as vLLM does) gives the rows
    the HF target gives, token for token; the template is the file's, its variables the JSON's."""
    import shutil

    from workbench.cli import main as cli_main
    from workbench.live.chat_regen import regenerate_chats
    from workbench.testing.fake_vllm import serve

    _, tgt, _, _, _ = world
    target = tmp_path / "target"
    shutil.copytree(smoke_demo / "target", target)
    tgt.tokenizer.chat_template = TAGGED                                 # the default: not the one asked for
    tgt.tokenizer.save_pretrained(str(target))
    jinja = tmp_path / "shout.jinja"
    jinja.write_text("{{ banner }}" + PLAIN.replace("{{ m.role }}:", "{{ m.role | upper }}:"))
    q = mt_bench(tmp_path / "question.jsonl", texts(smoke_demo, tgt.tokenizer, 3))
    opts = ["--chat-template", str(jinja), "--chat-template-kwargs", '{"banner": "BANNER "}']
    hf = regenerate_chats(tgt, q, tmp_path / "hf.jsonl", max_new_tokens=24, chat_template=str(jinja),
                          chat_template_kwargs={"banner": "BANNER "}, progress=False)
    drf = inputs.draft(str(smoke_demo / "draft-aligned"), tgt)
    with serve(tgt, drf, K=3) as url:
        assert cli_main(["regenerate", "--target", str(target), "--data", str(q), "--out", str(tmp_path / "v.jsonl"),
                         "--max-new-tokens", "24", "--server", "vllm", "--url", url, "--quiet", *opts]) == 0
        sent = url.state.requests
    a = [json.loads(x) for x in (tmp_path / "hf.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert len(a) == len(b) == 6 and len(sent) == 6 and hf.complete
    assert [r["input_ids"] for r in b] == [r["input_ids"] for r in a]               # token for token
    assert [r["generation"]["finish"] for r in b] == [r["generation"]["finish"] for r in a]
    assert {(r["generation"]["by"], r["generation"]["server"]) for r in b} == {("server", "vllm")}
    assert b[0]["prepared"]["template_sha256"] == a[0]["prepared"]["template_sha256"]
    second = tgt.tokenizer.decode(b[1]["input_ids"][:b[1]["n_prompt_tokens"]])
    assert second.startswith("BANNER USER:\n") and "ASSISTANT:\n" in second and second.endswith("assistant:\n")
    capsys.readouterr()
    assert cli_main(["regenerate", "--target", str(target), "--data", str(q), "--out", str(tmp_path / "x.jsonl"),
                     "--chat-template-kwargs", "[1]", "--quiet"]) == 2
    assert "error: --chat-template-kwargs: got list [1]: expected a JSON object" in capsys.readouterr().err


def test_an_interrupted_conversation_run_resumes_after_its_last_complete_round(world, smoke_demo, tmp_path):
    """regenerate_chats writes each finished round to OUT.part: a run killed in round 2 resumes there (round 1 is
    not asked again) and gives exactly the uninterrupted run's file; other settings are refused with one line; a
    finished OUT is reported as done."""
    from workbench.core.errors import WorkbenchError
    from workbench.live.chat_regen import regenerate_chats
    from workbench.model.capture import count_forwards

    _, tgt, _, _, _ = world
    tgt.tokenizer.chat_template = PLAIN
    q = mt_bench(tmp_path / "question.jsonl", texts(smoke_demo, tgt.tokenizer, 4))
    kw = {"max_new_tokens": 10, "batch_size": 2, "progress": False}
    with count_forwards(tgt.model) as c_full:
        full = regenerate_chats(tgt, q, tmp_path / "full.jsonl", **kw)

    class Killed(Exception):
        pass

    out = tmp_path / "out.jsonl"
    calls = {"n": 0}

    def boom(module, args, kwargs):                # killed in round 2 (once round 1 is written), a few steps in
        if (tmp_path / "out.jsonl.part").exists() and (tmp_path / "out.jsonl.part").stat().st_size:
            calls["n"] += 1
            if calls["n"] > 2:
                raise Killed()

    h = tgt.model.register_forward_pre_hook(boom, with_kwargs=True)
    try:
        with pytest.raises(Killed):
            regenerate_chats(tgt, q, out, **kw)
    finally:
        h.remove()
    part = [json.loads(x) for x in (tmp_path / "out.jsonl.part").read_text().splitlines()]
    assert not out.exists() and [r["generation"]["turn"] for r in part] == [0] * 4        # round 1 only, whole
    with pytest.raises(WorkbenchError, match=r"made with other settings \(max_new_tokens: 10, now 11\)"):
        regenerate_chats(tgt, q, out, **{**kw, "max_new_tokens": 11})
    with count_forwards(tgt.model) as c:
        res = regenerate_chats(tgt, q, out, **kw)
    assert (res.n_resumed, res.n_new) == (4, 4) and 0 < c["samples"] < c_full["samples"]   # round 2 only
    assert out.read_text() == (tmp_path / "full.jsonl").read_text() and full.n_new == 8
    assert not (tmp_path / "out.jsonl.part").exists() and not (tmp_path / "out.jsonl.part.json").exists()
    done = regenerate_chats(tgt, q, out, **kw)                                          # finished: reported, not redone
    assert done.complete and (done.n_resumed, done.n_new, done.n_rows) == (8, 0, 8)


def test_accept_diagnose_tune_read_a_conversation_file_with_a_chosen_template(smoke_demo, tmp_path, capsys):
    """`--chat-template NAME|FILE` on accept (and diagnose, tune: the same `chat_data`): the demo's `plain`
    template gives the default's numbers (the same rows), a template file is really used, and tokenised rows
    with the option are refused with one line."""
    from workbench.cli import main as cli_main
    from workbench.load.chat import ChatFile

    chat = str(smoke_demo / "val-chat.jsonl")
    base = ["--target", str(smoke_demo / "target"), "--draft", str(smoke_demo / "draft-aligned"), "--quiet"]

    def accept_lines(*extra):
        capsys.readouterr()
        assert cli_main(["accept", *base, "--data", chat, *extra]) == 0
        return [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("accept length")]

    default, plain = accept_lines(), accept_lines("--chat-template", "plain")
    assert len(default) == 2 and plain == default
    tgt = inputs.target(str(smoke_demo / "target"), progress=False)
    assert "(plain)" in inputs.dataset(ChatFile(chat, "plain"), tgt).chat["template"]
    bad = tmp_path / "refuses.jinja"
    bad.write_text("{{ raise_exception('this template is the one in use') }}")
    for cmd in (["accept", *base], ["diagnose", *base], ["tune", *base, "--steps", "1", "--eagle-topk", "1"]):
        capsys.readouterr()
        assert cli_main([*cmd, "--data", chat, "--chat-template", str(bad)]) == 2, cmd[0]
        err = capsys.readouterr().err
        assert "this template is the one in use" in err and len(err.strip().splitlines()) == 1, err
    assert cli_main(["accept", *base, "--data", str(smoke_demo / "val.jsonl"), "--chat-template", "plain"]) == 2
    assert "apply to conversation files, and this one holds tokenised rows" in capsys.readouterr().err
