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
