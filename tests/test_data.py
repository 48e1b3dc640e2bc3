"""workbench.rows.dataset: loading every source kind, canonical schema, aliases, bad input, summaries, previews."""

import doctest
import gzip
import json
import tracemalloc
import warnings

import pytest

from workbench import rows as data
from workbench.core.errors import WorkbenchError

WORDS = ["[UNK]", "hello", "world", "<script>", "alert(1)", "</script>", "how", "are", "you", "fine", "&", "ok"]


def make_tokenizer():
    """A tiny word-level tokenizer, built locally (no hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]")


def good_rows():
    return [
        {"input_ids": [1, 2, 6, 7, 8], "loss_mask": [0, 0, 1, 1, 1], "seq_len": 5, "n_prompt_tokens": 2,
         "n_response_tokens": 3, "source": "chat", "turns": 1},
        {"input_ids": [6, 7, 8, 9], "loss_mask": [0, 0, 0, 1], "seq_len": 4, "n_prompt_tokens": 3,
         "n_response_tokens": 1, "source": "code", "turns": 2},
        {"input_ids": [1, 9, 11, 2, 2, 2], "loss_mask": [0, 1, 1, 0, 1, 1], "seq_len": 6, "n_prompt_tokens": 1,
         "n_response_tokens": 5, "source": "chat", "turns": 3},
    ]


def write_jsonl(path, rows, *, gz=False):
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def one_line_error(fn, *needles):
    with pytest.raises(WorkbenchError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg, msg
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    return msg


# ---------------------------------------------------------------------------------------------- loading

def test_doctests():
    assert doctest.testmod(data).failed == 0


@pytest.mark.parametrize("gz", [False, True])
def test_jsonl_rows_are_canonical(tmp_path, gz):
    p = write_jsonl(tmp_path / ("d.jsonl.gz" if gz else "d.jsonl"), good_rows(), gz=gz)
    ds = data.load(p)
    assert len(ds) == 3
    rows = ds.rows()
    assert [r["_row"] for r in rows] == [0, 1, 2]
    assert rows[1]["_where"] == f"{p}:2"
    assert rows[2]["input_ids"] == [1, 9, 11, 2, 2, 2] and rows[2]["n_response_tokens"] == 5
    assert rows[0]["turns"] == 1                    # optional fields pass through
    assert ds.notices == []                         # nothing mapped or derived
    assert ds.format == ("JSON Lines (gzip)" if gz else "JSON Lines")


def test_parquet_and_datasets_sources_match_jsonl(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    want = [{k: v for k, v in r.items() if not k.startswith("_")} for r in data.load(good_rows()).rows()]
    pq.write_table(pa.Table.from_pylist(good_rows()), tmp_path / "d.parquet")
    hf = datasets.Dataset.from_list(good_rows())
    hf.save_to_disk(str(tmp_path / "saved"))
    for src in (tmp_path / "d.parquet", hf, tmp_path / "saved"):
        ds = data.load(src)
        got = [{k: v for k, v in r.items() if not k.startswith("_")} for r in ds]
        assert got == want, src
        assert len(ds) == 3
        assert ds.rows()[2]["_where"].endswith(":row 2")


def test_datasetdict_folder_points_at_a_split(tmp_path):
    import datasets

    datasets.DatasetDict({"train": datasets.Dataset.from_list(good_rows())}).save_to_disk(str(tmp_path / "dd"))
    one_line_error(lambda: data.load(tmp_path / "dd"), "DatasetDict", "train")
    (tmp_path / "plain").mkdir()
    one_line_error(lambda: data.load(tmp_path / "plain"), "save_to_disk")


def test_specforge_rows_get_derived_counts_with_notices():
    ds = data.load([{"input_ids": [5, 6, 7, 8, 9], "loss_mask": [0, 0, 0, 1, 1]}])
    r = ds.rows()[0]
    assert (r["seq_len"], r["n_prompt_tokens"], r["n_response_tokens"], r["source"]) == (5, 3, 2, "memory")
    assert any("n_prompt_tokens derived" in n for n in ds.notices)
    assert any("source" in n for n in ds.notices)


def test_aliases_are_mapped_with_notice(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [{"token_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4], "dataset": "x"}])
    ds = data.load(p)
    assert "'token_ids' read as input_ids (known alias)" in ds.notices       # known at load, before iterating
    r = ds.rows()[0]
    assert r["input_ids"] == [1, 2, 3, 4] and r["loss_mask"] == [0, 0, 1, 1] and r["source"] == "x"
    assert "token_ids" not in r and r["labels"] == [-100, -100, 3, 4]
    assert any("labels" in n for n in ds.notices)


def test_row_key_typo_gets_did_you_mean():
    r = data.load(good_rows()).rows()[0]
    with pytest.raises(KeyError) as e:
        r["token_ids"]
    assert isinstance(e.value, WorkbenchError)
    assert "did you mean 'input_ids'" in str(e.value) and "loss_mask" in str(e.value)


def test_streaming_does_not_hold_rows(tmp_path):
    row = json.dumps({"input_ids": list(range(40)), "loss_mask": [0] * 10 + [1] * 30, "source": "s"})
    p = tmp_path / "big.jsonl"
    p.write_text((row + "\n") * 5000 + "this is not json\n")
    ds = data.load(p)
    tracemalloc.start()
    n = len(ds)                                                   # counts lines, parses nothing
    it = iter(ds)
    first = next(it)                                              # lazy: the bad last line is not read yet
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert n == 5001 and first["_row"] == 0
    assert peak < 200_000, peak                                   # the file is ~1.3 MB as Python rows: >> 10 MB
    with pytest.raises(WorkbenchError, match=r"big.jsonl:5001: row: not valid JSON"):
        for _ in it:
            pass


# ---------------------------------------------------------------------------------------------- bad input

def test_missing_file(tmp_path):
    one_line_error(lambda: data.load(tmp_path / "nope.jsonl"), "nope.jsonl", "no such file")


def test_empty_file(tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    one_line_error(lambda: data.load(tmp_path / "e.jsonl"), "e.jsonl", "empty file")
    (tmp_path / "b.jsonl").write_text("\n \n")
    one_line_error(lambda: data.load(tmp_path / "b.jsonl"), "b.jsonl", "empty file")


def test_not_json_line_reports_line_number(tmp_path):
    p = write_jsonl(tmp_path / "n.jsonl", [good_rows()[0], "", "{oops", good_rows()[1]])
    ds = data.load(p)
    one_line_error(ds.rows, f"{p}:3: row: not valid JSON")
    rep = ds.validate()
    assert (rep.n_rows, rep.n_invalid) == (3, 1) and str(rep.problems[0]).startswith(f"{p}:3:")
    # a file whose first line is not JSON is not a dataset at all: error at load
    (tmp_path / "t.jsonl").write_text("hello world\n")
    one_line_error(lambda: data.load(tmp_path / "t.jsonl"), "t.jsonl:1", "not valid JSON", "JSON Lines")


def test_json_list_row(tmp_path):
    p = write_jsonl(tmp_path / "l.jsonl", [good_rows()[0], [1, 2, 3]])
    one_line_error(data.load(p).rows, f"{p}:2: row: got a JSON list, not an object")
    (tmp_path / "l1.jsonl").write_text("[1, 2, 3]\n")
    one_line_error(lambda: data.load(tmp_path / "l1.jsonl"), "l1.jsonl:1", "JSON list")


@pytest.mark.parametrize("ids,needle", [
    ([1, "2", 3], "input_ids[1]: got str '2' (expected int token ids)"),
    ([1, 2.0, 3], "input_ids[1]: got float 2.0 (expected int token ids)"),
    ([1, -4, 3], "input_ids[1]: negative id -4 (expected ids >= 0)"),
])
def test_bad_ids(tmp_path, ids, needle):
    p = write_jsonl(tmp_path / "i.jsonl", [good_rows()[0], {"input_ids": ids, "loss_mask": [0, 1, 1]}])
    one_line_error(data.load(p).rows, f"{p}:2: {needle}")


def test_ids_at_or_above_vocab_size(tmp_path):
    p = write_jsonl(tmp_path / "v.jsonl", [{"input_ids": [1, 2, 12, 3], "loss_mask": [0, 1, 1, 1]}])
    assert data.load(p).validate().ok                                          # no vocab given: fine
    one_line_error(data.load(p, tokenizer=make_tokenizer()).rows, f"{p}:1: input_ids[2]: id 12", "(expected ids < 12)")
    one_line_error(data.load(p, vocab_size=3).rows, "input_ids[2]: id 12", "ids < 3")


def test_loss_mask_length_mismatch(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [{"input_ids": [1, 2, 3], "loss_mask": [0, 1]}])
    one_line_error(data.load(p).rows, f"{p}:1: loss_mask: length 2 != len(input_ids) 3")


def test_seq_len_disagrees(tmp_path):
    p = write_jsonl(tmp_path / "s.jsonl", [{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "seq_len": 4}])
    one_line_error(data.load(p).rows, f"{p}:1: seq_len: 4 but input_ids has 3 tokens")


def test_counts_and_mask_consistency(tmp_path):
    rows = [
        {"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 1, 1], "n_prompt_tokens": 2, "n_response_tokens": 1},
        {"input_ids": [1, 2, 3, 4], "loss_mask": [0, 1, 1, 1], "n_prompt_tokens": 2},
        {"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 0, 0]},
        {"input_ids": [1, 2, 3], "loss_mask": [0, 2, 1]},
    ]
    rep = data.load(write_jsonl(tmp_path / "c.jsonl", rows)).validate()
    text = [str(p) for p in rep.problems]
    assert rep.n_invalid == 4
    assert any(":1: n_prompt_tokens + n_response_tokens: 2 + 1 = 3 (expected seq_len = 4)" in t for t in text)
    assert any(":2: loss_mask: 1 at position 1, inside the prompt" in t for t in text)
    assert any(":3: loss_mask: all zero" in t for t in text)
    assert any(":4: loss_mask[1]: got int 2 (expected 0 or 1)" in t for t in text)


def test_missing_key_lists_keys_and_did_you_mean(tmp_path):
    p = write_jsonl(tmp_path / "k.jsonl", [{"input_idz": [1, 2], "loss_mask": [0, 1]}])
    msg = one_line_error(data.load(p).rows, f"{p}:1: input_ids: missing", "input_idz, loss_mask")
    assert "did you mean 'input_idz'" in msg


def test_parquet_without_expected_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a", "b"], "inputs": [[1], [2]]}), tmp_path / "x.parquet")
    one_line_error(lambda: data.load(tmp_path / "x.parquet"), "x.parquet", "none of the expected columns",
                   "[text, inputs]")


def test_skip_mode_counts_and_warns(tmp_path):
    rows = [good_rows()[0], {"input_ids": [1, -2], "loss_mask": [0, 1]}, "nope", good_rows()[1]]
    ds = data.load(write_jsonl(tmp_path / "k.jsonl", rows), on_error="skip")
    with pytest.warns(UserWarning, match="skipped 2 bad rows"):
        got = ds.rows()
    assert [r["_row"] for r in got] == [0, 3] and ds.n_skipped == 2
    rep = ds.validate(first_error=True)
    assert rep.stopped_early and rep.n_rows == 2 and rep.n_invalid == 1


def test_bad_arguments():
    one_line_error(lambda: data.load(good_rows(), on_error="ignore"), "on_error")
    one_line_error(lambda: data.load(42), "int")
    one_line_error(lambda: data.load(good_rows()).preview(7), "row 7 is out of range", "3 rows")


# ---------------------------------------------------------------------------------------------- notebook helpers

def test_describe_lists_keys_types_counts_examples(tmp_path):
    rows = good_rows() + [{"input_ids": [1, 2], "loss_mask": [0, 1], "note": "x"}]
    d = data.load(write_jsonl(tmp_path / "d.jsonl", rows)).describe()
    keys = {k.key: k for k in d.keys}
    assert d.n_rows == 4
    assert keys["input_ids"].types == "list[int]" and keys["input_ids"].rows == 4
    assert keys["source"].rows == 3 and keys["note"].rows == 1 and keys["note"].example == "'x'"
    assert keys["input_ids"].example == "[1, 2, 6, 7, 8]"
    assert list(d.to_frame().columns) == ["key", "types", "rows", "example"]
    assert "source" in str(d) and "<table" in d._repr_html_()


def test_summary_by_source():
    df = data.load(good_rows()).summary()
    assert list(df.index) == ["chat", "code", "(all)"]
    assert df.loc["chat", "rows"] == 2 and df.loc["chat", "tokens"] == 11 and df.loc["chat", "loss_tokens"] == 7
    assert df.loc["code", "prompt_max"] == 3 and df.loc["(all)", "response_max"] == 5
    assert df.loc["(all)", "seq_max"] == 6 and df.loc["(all)", "rows"] == 3


def test_summary_refuses_bad_rows_in_raise_mode():
    rows = good_rows() + [{"input_ids": [1, 2], "loss_mask": [1]}]
    one_line_error(data.load(rows).summary, "<memory>:row 3: loss_mask: length 1")
    with pytest.warns(UserWarning, match="leaves out 1 bad rows"):
        assert data.load(rows, on_error="skip").summary().loc["(all)", "rows"] == 3


def test_preview_text_and_escaped_html(tmp_path):
    tok = make_tokenizer()
    # prompt "hello <script> alert(1) </script>", response "how are you"
    ds = data.load([{"input_ids": [1, 3, 4, 5, 6, 7, 8], "loss_mask": [0, 0, 0, 0, 1, 1, 1], "source": "web"}],
                   tokenizer=tok)
    pv = ds.preview(0)
    assert "--- prompt (loss_mask 0, tokens 0..3) ---\nhello <script> alert(1) </script>" in pv.text
    assert "--- response, trained (loss_mask 1, tokens 4..6) ---\nhow are you" in pv.text
    assert "<script>" not in pv.html and "&lt;script&gt;" in pv.html and "&lt;/script&gt;" in pv.html
    assert pv.html.count("wb-loss1") == 3 and pv.html.count("wb-loss0") == 4
    assert pv._repr_html_() == pv.html
    data.write_html(pv, tmp_path / "p.html")
    assert "&lt;script&gt;" in (tmp_path / "p.html").read_text()
    # without a tokenizer the ids are shown
    assert "1 3 4 5" in data.load(ds.rows()).preview(0).text


def test_rows_limit_stops_before_later_bad_rows():
    ds = data.load(good_rows() + [{"input_ids": [1, -1], "loss_mask": [0, 1]}])
    assert [r["_row"] for r in ds.rows(limit=2)] == [0, 1] and len(ds.rows(limit=3)) == 3
    one_line_error(ds.rows, "<memory>:row 3: input_ids[1]: negative id -1")
