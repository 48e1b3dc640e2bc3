"""Conversations, prompts and other tools' files → canonical rows (issue 28): layouts, both mask methods, the
pitfalls of shared/chat-data.md with real template texts (tests/data/templates), bad input, hub names,
`workbench prepare` and `workbench inspect` on conversations. Nothing downloads; no model is loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from chat_tiny import byte_tokenizer, enc

from workbench import rows as data
from workbench.core.errors import WorkbenchError
from workbench.load.chat import ChatTemplate, Tally, chat_dataset, chat_rows
from workbench.load.prepare import prepare
from workbench.rows import conversations
from workbench.stats.counts import reply_starts

CONV = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello there"}, {"role": "user", "content": "More"},
        {"role": "assistant", "content": "Sure thing"}]
SHAREGPT = [{"from": {"system": "system", "user": "human", "assistant": "gpt"}[m["role"]], "value": m["content"]}
            for m in CONV]


def write_jsonl(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def chatml_reference(tok):
    """The per-turn rows of CONV under ChatML, from explicit token ids (independent of the implementation)."""
    S, E = tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|im_end|>")
    nl = enc(tok, "\n")

    def msg(role, text):
        return [S] + enc(tok, f"{role}\n{text}") + [E] + nl

    sys_, u1, u2 = msg("system", "Be brief."), msg("user", "Hi"), msg("user", "More")
    head = [S] + enc(tok, "assistant\n")
    r1, r2 = enc(tok, "Hello there") + [E] + nl, enc(tok, "Sure thing") + [E] + nl
    p1 = sys_ + u1 + head
    p2 = p1 + r1 + u2 + head
    per_turn = [(p1 + r1, [0] * len(p1) + [1] * len(r1)), (p2 + r2, [0] * len(p2) + [1] * len(r2))]
    all_turns = (p2 + r2, [0] * len(p1) + [1] * len(r1) + [0] * (len(u2) + len(head)) + [1] * len(r2))
    return per_turn, all_turns


@pytest.mark.parametrize("layout", ["specforge", "sharegpt", "openai", "json", "parquet", "save_to_disk"])
def test_every_layout_gives_the_reference_rows(tmp_path, layout):
    tok = byte_tokenizer("chatml")
    per_turn, all_turns = chatml_reference(tok)
    recs = {"specforge": [{"id": "a", "conversations": CONV}], "sharegpt": [{"id": "a", "conversations": SHAREGPT}],
            "openai": [{"prompt": "Hi", "prompt_id": "a", "messages": CONV}]}.get(layout, [{"id": "a", "messages": CONV}])
    if layout == "json":
        path = tmp_path / "chats.json"
        path.write_text(json.dumps(recs, indent=1))
    elif layout in ("parquet", "save_to_disk"):
        import datasets

        ds = datasets.Dataset.from_list(recs)
        path = tmp_path / ("chats.parquet" if layout == "parquet" else "chats")
        ds.to_parquet(str(path)) if layout == "parquet" else ds.save_to_disk(str(path))
    else:
        path = write_jsonl(tmp_path / "chats.jsonl", recs)
    tpl = ChatTemplate(tok)
    got = [(r["input_ids"], r["loss_mask"]) for r in chat_rows(conversations.read(str(path)), tpl)]
    assert got == per_turn
    (row,) = chat_rows(conversations.read(str(path)), tpl, all_turns=True)
    assert (row["input_ids"], row["loss_mask"]) == all_turns
    assert row["prepared"]["mask"] == "prefix" and row["prepared"]["layout"] == "all-turns"
    assert reply_starts(row["loss_mask"]) == [len(per_turn[0][0]) - len(enc(tok, "Hello there")) - 2,
                                            len(per_turn[1][0]) - len(enc(tok, "Sure thing")) - 2]
    ds = chat_dataset(str(path), tok)                   # on the fly: canonical rows with provenance
    r = ds.rows()[1]
    assert r["n_prompt_tokens"] == per_turn[1][1].index(1) and r["source"] == path.name.split(".")[0]
    assert r["prepared"]["turn"] == 4 and r["prepared"]["template"] == "chatml" and r["id"] == "a"


def test_reasoning_and_tool_turns_are_rendered_by_the_template():
    tok = byte_tokenizer("qwen3")
    conv = conversations.conversation({"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "rain"},
        {"role": "assistant", "content": "It rains.", "reasoning_content": "The tool said rain."}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]}, 0, "t.jsonl:1", "t")
    rows = list(chat_rows([conv], ChatTemplate(tok)))
    texts = [tok.decode([i for i, m in zip(r["input_ids"], r["loss_mask"]) if m]) for r in rows]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in texts[0]
    assert texts[1] == "<think>\nThe tool said rain.\n</think>\n\nIt rains.<|im_end|>\n"
    assert "<tools>" in tok.decode(rows[0]["input_ids"]) and "<tool_response>\nrain" in tok.decode(rows[1]["input_ids"])


def test_generation_tags_are_used_first_and_the_prefix_method_otherwise():
    conv = conversations.conversation({"messages": CONV}, 0, "f.jsonl:1", "f")
    tagged = list(chat_rows([conv], ChatTemplate(byte_tokenizer("qwen3-tagged"))))
    plain = list(chat_rows([conv], ChatTemplate(byte_tokenizer("qwen3"))))
    assert {r["prepared"]["mask"] for r in tagged} == {"generation"}
    assert {r["prepared"]["mask"] for r in plain} == {"prefix"}
    tok = byte_tokenizer("qwen3")
    for t, p in zip(tagged, plain):                      # same ids; the tags leave the newline after <|im_end|> out
        assert t["input_ids"] == p["input_ids"]
        assert tok.decode([i for i, m in zip(p["input_ids"], p["loss_mask"]) if m]) == \
            tok.decode([i for i, m in zip(t["input_ids"], t["loss_mask"]) if m]) + "\n"


# ---------------------------------------------------------------------------------------------- the pitfalls

def test_pitfall_second_bos_never_added():
    """Llama-3's template writes BOS and its tokenizer's post-processor adds one: text → ids twice = two BOS."""
    tok = byte_tokenizer("llama3", bos_post_processor=True)
    bos = tok.bos_token_id
    naive = tok(tok.apply_chat_template(CONV[1:3], tokenize=False))["input_ids"]
    assert naive[:2] == [bos, bos]                      # the pitfall, as open-r1 #462 hit it
    rows = list(chat_rows([conversations.conversation({"messages": CONV}, 0, "f:1", "f")], ChatTemplate(tok)))
    for r in rows:
        assert r["input_ids"][0] == bos and r["input_ids"].count(bos) == 1
    tok.chat_template = "{{ bos_token }}" + tok.chat_template   # a template that writes two: refused, one line
    with pytest.raises(WorkbenchError, match=r"f:1: turn 2: .*two BOS"):
        list(chat_rows([conversations.conversation({"messages": CONV}, 0, "f:1", "f")], ChatTemplate(tok)))


def test_pitfall_all_zero_mask_without_generation_tags():
    tok = byte_tokenizer("llama3")
    raw = tok.apply_chat_template(CONV, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    assert not any(raw["assistant_masks"])              # transformers: all zero without the tags
    rows = list(chat_rows([conversations.conversation({"messages": CONV}, 0, "f:1", "f")], ChatTemplate(tok)))
    assert [r["prepared"]["mask"] for r in rows] == ["prefix", "prefix"]
    assert [tok.decode([i for i, m in zip(r["input_ids"], r["loss_mask"]) if m]) for r in rows] == \
        ["Hello there<|eot_id|>", "Sure thing<|eot_id|>"]


def test_pitfall_qwen3_empty_think_block():
    conv = conversations.conversation({"messages": CONV[1:3]}, 0, "f:1", "f")
    tok = byte_tokenizer("qwen3")
    tally = Tally()
    (row,) = chat_rows([conv], ChatTemplate(tok), tally=tally)
    masked = tok.decode([i for i, m in zip(row["input_ids"], row["loss_mask"]) if m])
    assert masked == "<think>\n\n</think>\n\nHello there<|im_end|>\n"         # inserted and masked as reply
    assert "enable_thinking" in tally.notices["empty_think"]
    (row,) = chat_rows([conv], ChatTemplate(tok, {"enable_thinking": False}), tally=Tally())
    prompt = tok.decode(row["input_ids"][:row["loss_mask"].index(1)])
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")   # the server's non-thinking prompt
    assert tok.decode([i for i, m in zip(row["input_ids"], row["loss_mask"]) if m]) == "Hello there<|im_end|>\n"


# ---------------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("recs, match", [
    ([{"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]}],
     r"chats.jsonl:1: turn 1: unknown role 'robot'"),
    ([{"messages": CONV[1:3]}, {"messages": [{"role": "assistant", "content": "b"}, {"role": "user", "content": "a"}]}],
     r"chats.jsonl:2: turn 0: an assistant turn first"),
    ([{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "  "}]}],
     r"chats.jsonl:1: turn 1: an empty reply"),
])
def test_bad_conversations_are_one_line(tmp_path, recs, match):
    path = write_jsonl(tmp_path / "chats.jsonl", recs)
    with pytest.raises(WorkbenchError, match=match) as e:
        list(chat_rows(conversations.read(str(path)), ChatTemplate(byte_tokenizer("chatml"))))
    assert "\n" not in str(e.value)
    res = prepare(byte_tokenizer("chatml"), str(path), tmp_path / "out.jsonl", on_error="skip")
    assert sum(n for n, _ in res.skipped.values()) == 1               # counted, the first named: nothing lost


def test_no_template_and_prefix_unstable_templates(tmp_path):
    path = write_jsonl(tmp_path / "chats.jsonl", [{"messages": CONV}])
    with pytest.raises(WorkbenchError, match="has no chat template"):
        ChatTemplate(byte_tokenizer(None))
    with pytest.raises(WorkbenchError, match=r"chats.jsonl:1: turn 2: prefix-unstable chat template"):
        list(chat_rows(conversations.read(str(path)), ChatTemplate(byte_tokenizer("qwen3")), all_turns=True))
    tok = byte_tokenizer("chatml")                      # a generation prompt the reply does not continue
    tok.chat_template = tok.chat_template.replace("'<|im_start|>assistant\\n'", "'<|im_start|>assistant:'")
    with pytest.raises(WorkbenchError, match=r"chats.jsonl:1: turn 2: prefix-unstable .* not a token prefix"):
        list(chat_rows(conversations.read(str(path)), ChatTemplate(tok)))


def test_max_length_drops_or_truncates_and_counts(tmp_path):
    path = write_jsonl(tmp_path / "chats.jsonl", [{"messages": CONV}])
    tok = byte_tokenizer("chatml")
    per_turn, _ = chatml_reference(tok)
    L = len(per_turn[0][0]) + 2                         # the first row fits, the second does not
    res = prepare(tok, str(path), tmp_path / "drop.jsonl", max_length=L)
    assert res.n_rows == 1 and res.tally.dropped == {f"longer than --max-length {L}: dropped": 1}
    assert "chats.jsonl:1: turn 4" in res.summary()
    res = prepare(tok, str(path), tmp_path / "cut.jsonl", max_length=len(per_turn[1][1]) - 3, too_long="truncate")
    rows = data.load(str(tmp_path / "cut.jsonl")).rows()
    assert res.n_rows == 2 and len(rows[1]["input_ids"]) == len(per_turn[1][1]) - 3
    assert "truncated" in res.summary()


# ---------------------------------------------------------------------------------------------- prompts, other tools

@pytest.mark.parametrize("rec, turns", [
    ({"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Now shorter."]}, ["Write a poem.", "Now shorter."]),
    ({"question": "2+2?", "answer": "4"}, ["2+2?"]),
    ({"task_id": "HumanEval/0", "prompt": "def f():\n", "canonical_solution": "  pass"}, ["def f():\n"]),
    ({"instruction": "Sum", "input": "1 2", "output": "3"}, ["Sum\n\n1 2"]),
    ({"instruction": "Hello", "input": "", "output": "Hi"}, ["Hello"]),
    ({"prompt": "Tell me"}, ["Tell me"]),
])
def test_prompt_only_sets_become_user_turns(rec, turns):
    c = conversations.conversation(rec, 0, "q.jsonl:1", "q")
    assert c.prompt_only and [m["content"] for m in c.messages] == turns and not c.replies
    assert c.source == rec.get("category", "q")
    with pytest.raises(WorkbenchError, match="q.jsonl:1: prompt only .* workbench regenerate"):
        list(chat_rows([c], ChatTemplate(byte_tokenizer("chatml"))))


def test_other_tools_tokenised_layouts(tmp_path):
    import datasets

    sf = write_jsonl(tmp_path / "specforge.jsonl", [{"input_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1]}])
    r = data.load(str(sf)).rows()[0]
    assert (r["n_prompt_tokens"], r["n_response_tokens"], r["source"]) == (2, 2, "specforge")
    spec = tmp_path / "speculators"
    datasets.Dataset.from_list([{"input_ids": [1, 2, 3, 4, 5], "loss_mask": [0, 0, 1, 1, 1], "seq_len": 5},
                                {"input_ids": [1, 2, 9, 3, 4, 5, 6], "loss_mask": [0, 0, 0, 0, 0, 1, 1], "seq_len": 7}]
                               ).save_to_disk(str(spec))
    assert [r["n_prompt_tokens"] for r in data.load(str(spec)).rows()] == [2, 5]
    assert conversations.sniff(str(spec)) == "tokenised"
    regen = write_jsonl(tmp_path / "regen.jsonl", [
        {"id": "q1-0", "primary_id": "q1", "input_ids": [3, 4, 5, 6], "loss_mask": [0, 1, 1, 1],
         "text": "<|im_start|>user...", "metadata": {"turn": 0, "model": "t"}}])
    r = data.load(str(regen)).rows()[0]
    assert r["metadata"] == {"turn": 0, "model": "t"} and r["primary_id"] == "q1" and r["n_response_tokens"] == 3
    assert data.load(str(regen)).validate().ok


# ---------------------------------------------------------------------------------------------- hub names

def test_hub_names_offline_and_local(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))           # an empty cache: nothing cached, nothing fetched
    with pytest.raises(WorkbenchError, match=r"hf:nobody/nothing:test_sft:5: offline and not in the datasets cache "
                                             r".*save_to_disk") as e:
        conversations.sniff("hf:nobody/nothing:test_sft:5") or data.load("hf:nobody/nothing:test_sft:5")
    assert "\n" not in str(e.value)
    local = tmp_path / "ultrachat"
    datasets.DatasetDict({"test_sft": datasets.Dataset.from_list(
        [{"prompt": "Hi", "prompt_id": str(i), "messages": CONV[1:3]} for i in range(3)])}).save_to_disk(str(local))
    rows = list(chat_rows(conversations.read(f"hf:{local}:test_sft:2"), ChatTemplate(byte_tokenizer("chatml"))))
    assert len(rows) == 2 and rows[0]["source"] == "ultrachat"
    with pytest.raises(WorkbenchError, match="a DatasetDict folder with splits"):
        data.load(str(local))                                       # the folder itself: name the split


# ---------------------------------------------------------------------------------------------- the commands

def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True, cwd=cwd)


def test_prepare_command_atomic_resumable_and_inspect(tmp_path):
    tok = byte_tokenizer("chatml")
    tok.save_pretrained(str(tmp_path / "tok"))
    recs = [{"id": str(i), "source": "sa" if i % 2 else "sb", "messages": CONV} for i in range(5)]
    path = write_jsonl(tmp_path / "chats.jsonl", recs)
    out = tmp_path / "rows.jsonl"
    first = list(chat_rows(conversations.read(str(path)), ChatTemplate(tok), file="chats.jsonl"))
    import workbench.load.prepare as prep

    calls = []

    def killed(convs, *a, **kw):                          # a run killed in its third record
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return chat_rows(convs, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prep, "chat_rows", killed)
        with pytest.raises(KeyboardInterrupt):
            prepare(str(tmp_path / "tok"), str(path), out)
    assert not out.exists() and (tmp_path / "rows.jsonl.part").exists()
    with open(tmp_path / "rows.jsonl.part", "a") as f:
        f.write('{"input_ids": [1')                       # and a torn last line
    r = cli("prepare", "--tokenizer", str(tmp_path / "tok"), "--data", str(path), "--out", str(out),
            "--json", str(tmp_path / "p.json"))
    assert r.returncode == 0, r.stderr
    assert "10 rows" in r.stdout and "from an interrupted run" in r.stdout and " sa " in r.stdout, r.stdout
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(g["input_ids"], g["loss_mask"]) for g in got] == [(f["input_ids"], f["loss_mask"]) for f in first]
    assert not (tmp_path / "rows.jsonl.part").exists() and data.load(str(out)).validate().ok
    r = cli("inspect", str(path), "--tokenizer", str(tmp_path / "tok"))
    assert r.returncode == 0, r.stderr
    assert "chat template chatml" in r.stdout and "mask method: prefix (10 rows)" in r.stdout
    assert "[[Hello there<|im_end|>" in r.stdout and "without generation tags" in r.stdout
    r = cli("prepare", "--tokenizer", str(tmp_path / "tok"), "--data", str(path), "--out", str(tmp_path / "x.jsonl"),
            "--all-turns")
    assert r.returncode == 0 and "all-turns" in r.stdout and data.load(str(tmp_path / "x.jsonl")).validate().ok
