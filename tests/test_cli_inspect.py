"""`workbench inspect`: output, --json, --preview/--html, and exit codes 0 (valid) / 1 (bad rows) / 2 (unusable)."""

import json
import subprocess
import sys

import pytest

from workbench.cli import main

ROWS = [
    {"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 1, 1], "source": "chat"},
    {"input_ids": [4, 3, 2], "loss_mask": [0, 1, 1], "source": "code"},
]


def write(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return str(path)


def inspect(capsys, *argv):
    rc = main(["inspect", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_valid_file_exit_0(tmp_path, capsys):
    rc, out, err = inspect(capsys, write(tmp_path / "ok.jsonl", ROWS))
    assert rc == 0 and err == ""
    assert "ok.jsonl: JSON Lines, 2 rows" in out
    assert "input_ids" in out and "list[int]" in out
    assert "validation: 2 rows checked, 2 valid, 0 invalid" in out
    assert "chat" in out and "code" in out                  # summary by source


def test_alias_notice_printed(tmp_path, capsys):
    rc, out, _ = inspect(capsys, write(tmp_path / "a.jsonl", [{"token_ids": [1, 2], "loss_mask": [0, 1]}]))
    assert rc == 0 and "notice: 'token_ids' read as input_ids (known alias)" in out


@pytest.mark.parametrize("bad,needle", [
    ("{not json", ":2: row: not valid JSON"),
    ([1, 2, 3], ":2: row: got a JSON list, not an object"),
    ({"input_ids": [1, "2"], "loss_mask": [0, 1]}, ":2: input_ids[1]: got str '2'"),
    ({"input_ids": [1, 2.5], "loss_mask": [0, 1]}, ":2: input_ids[1]: got float 2.5"),
    ({"input_ids": [1, 2, 3], "loss_mask": [0, 1]}, ":2: loss_mask: length 2 != len(input_ids) 3"),
    ({"input_ids": [1, -2], "loss_mask": [0, 1]}, ":2: input_ids[1]: negative id -2"),
    ({"input_ids": [1, 2], "loss_mask": [0, 1], "seq_len": 3}, ":2: seq_len: 3 but input_ids has 2 tokens"),
    ({"input_ids": [1, 99], "loss_mask": [0, 1]}, ":2: input_ids[1]: id 99 is out of range for vocab size 50"),
    ({"token_id": [1, 2], "loss_mask": [0, 1]}, ":2: input_ids: missing; keys present: token_id, loss_mask; did you mean"),
])
def test_bad_rows_exit_1(tmp_path, capsys, bad, needle):
    p = write(tmp_path / "b.jsonl", [ROWS[0], bad, ROWS[1]])
    rc, out, err = inspect(capsys, p, "--vocab-size", 50)
    assert rc == 1 and err == ""
    assert "3 rows checked, 2 valid, 1 invalid" in out
    assert f"{p}{needle}" in out


def test_first_error_and_max_problems(tmp_path, capsys):
    bad = {"input_ids": [1, -2], "loss_mask": [0, 1]}
    p = write(tmp_path / "b.jsonl", [ROWS[0], bad, bad, bad, ROWS[1]])
    rc, out, _ = inspect(capsys, p, "--first-error")
    assert rc == 1 and "2 rows checked (stopped at the first bad row), 1 valid, 1 invalid" in out
    rc, out, _ = inspect(capsys, p, "--max-problems", 1)
    assert rc == 1 and out.count("negative id") == 1 and "... and 2 more problems" in out


@pytest.mark.parametrize("make,needle", [
    (lambda d: str(d / "missing.jsonl"), "missing.jsonl: no such file"),
    (lambda d: write(d / "empty.jsonl", []), "empty.jsonl: empty file"),
    (lambda d: write(d / "text.jsonl", ["just some text", "more"]), "text.jsonl:1: row: not valid JSON"),
    (lambda d: write(d / "list.jsonl", [[1, 2]]), "list.jsonl:1: row: got a JSON list"),
    (lambda d: str(d), "not a dataset saved with datasets.save_to_disk"),
])
def test_unusable_input_exit_2(tmp_path, capsys, make, needle):
    rc, out, err = inspect(capsys, make(tmp_path))
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


def test_parquet_without_expected_columns_exit_2(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["hi"], "label": [1]}), tmp_path / "t.parquet")
    rc, _, err = inspect(capsys, tmp_path / "t.parquet")
    assert rc == 2 and "none of the expected columns" in err and "[text, label]" in err


def test_json_output(tmp_path, capsys):
    p = write(tmp_path / "b.jsonl", [ROWS[0], {"input_ids": [1, 2, 3], "loss_mask": [0, 1]}])
    rc, out, _ = inspect(capsys, p, "--json")
    doc = json.loads(out)
    assert rc == 1
    assert doc["validation"]["n_invalid"] == 1 and doc["validation"]["problems"][0].startswith(f"{p}:2: loss_mask")
    assert {k["key"] for k in doc["description"]["keys"]} == {"input_ids", "loss_mask", "source"}
    assert doc["summary"][0]["source"] == "chat" and doc["summary"][0]["tokens"] == 4


def test_preview_with_tokenizer_and_html(tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "hi", "<script>", "there", "bye"]
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    p = write(tmp_path / "d.jsonl", [{"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 1, 1]}])
    html_path = tmp_path / "pv.html"
    rc, out, _ = inspect(capsys, p, "--tokenizer", tmp_path / "tok", "--preview", 0, "--html", html_path)
    assert rc == 0
    assert "--- prompt (loss_mask 0, tokens 0..1) ---\nhi <script>" in out
    assert "--- response, trained (loss_mask 1, tokens 2..3) ---\nthere bye" in out
    page = html_path.read_text()
    assert "&lt;script&gt;" in page and "<script>" not in page
    # ids beyond the tokenizer's vocab (5) are invalid rows
    p2 = write(tmp_path / "v.jsonl", [{"input_ids": [1, 7], "loss_mask": [0, 1]}])
    rc, out, _ = inspect(capsys, p2, "--tokenizer", tmp_path / "tok")
    assert rc == 1 and "id 7 is out of range for vocab size 5" in out
    rc, _, err = inspect(capsys, p, "--tokenizer", tmp_path / "nope")
    assert rc == 2 and "tokenizer" in err


def test_no_traceback_from_the_console_script(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"input_ids": [1, 2]\n')
    r = subprocess.run([sys.executable, "-m", "workbench", "inspect", str(tmp_path / "x.jsonl")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: ") and "x.jsonl:1: row: not valid JSON" in r.stderr
