"""The report pages' evidence tables, built here so that a notebook cell stays a few lines (issue 35).

    >>> from workbench.report.evidence import HEADERS
    >>> HEADERS["verify_ct"]
    'verify steps'

Every table is a :func:`workbench.report.tables.table` (a key under it, cells wrapped at spaces only); accept
lengths name their estimator in the key, and intervals come from ``AcceptanceResult.intervals()``, computed once
per result, so a table and the summary above it print the same interval.
"""

from __future__ import annotations

import pandas as pd

from workbench.analysis.diagnose import rank_tied
from workbench.report.tables import table

# per-request columns of a live comparison, as a reader names them
HEADERS = {"sample": "row", "reply": "reply", "source": "source", "n_prompt": "prompt tokens",
           "n_output": "output tokens", "verify_ct": "verify steps", "live_accept_length": "live accept length",
           "server_accept_length": "server's own field", "live_histogram": "accepted 0..K",
           "fingerprint": "fingerprint", "seconds": "seconds"}


def ranking(results: dict, trained: str | None = None):
    """(order, Table): the wirings best first (ties within the 95% intervals, the trained wiring first among them)."""
    stats = {}
    for spec, r in results.items():
        lo, hi = r.intervals()["accept_length"]
        stats[spec] = {"accept_length": r.accept_length, "accept_length_low": lo, "accept_length_high": hi,
                       "alpha1": r.cumulative[0]}
    order = rank_tied(list(results), stats, trained=trained)
    lead_low = stats[order[0]]["accept_length_low"]
    setting = next(iter(results.values())).setting
    frame = pd.DataFrame([{
        "wiring": spec, "accept length": results[spec].accept_length,
        "95% interval": f"{stats[spec]['accept_length_low']:.2f}–{stats[spec]['accept_length_high']:.2f}",
        "tied for best": "yes" if not lead_low > stats[spec]["accept_length_high"] else "no",
        "decode path": results[spec].decode_path["accept_length"], "step-1 top-1": results[spec].top1,
        "trained on": "yes" if spec == trained else "", "chains": results[spec].n_chains} for spec in order])
    return order, table(frame, {
        "wiring": "the taps fed to the draft", "accept length": setting.accept_label("every-position"),
        "95% interval": "of the accept length: bootstrap over samples (the same interval as the summaries above)",
        "tied for best": "its interval overlaps the leader's", "decode path": setting.accept_label("decode-path"),
        "step-1 top-1": "share of chains whose first draft token is the target's greedy token",
        "trained on": "the taps the draft config says it was trained on", "chains": "counted chains"})


def foreign(foreign_results: dict, results: dict):
    """The same wirings on data the target did not write (``val-foreign.jsonl``) and on its regenerated twin."""
    frame = pd.DataFrame([{
        "wiring": spec, "foreign every position": foreign_results[spec].accept_length,
        "regenerated every position": results[spec].accept_length,
        "foreign decode path": foreign_results[spec].decode_path["accept_length"],
        "regenerated decode path": results[spec].decode_path["accept_length"]} for spec in results]).round(3)
    return table(frame, {
        "wiring": "the taps fed to the draft",
        "foreign every position": "accept length (every position) on val-foreign.jsonl: teacher-forced on text "
                                  "the target did not write",
        "regenerated every position": "the same on val.jsonl (the same prompts, the target's greedy responses)",
        "foreign decode path": "decode-path accept length on val-foreign.jsonl (an approximation there)",
        "regenerated decode path": "decode-path accept length on val.jsonl: what a server reports"})


def draft(info: dict):
    """Notebook 02: what :func:`workbench.model.draft.describe_draft` says, one property a row."""
    frame = pd.DataFrame([{"property": k.replace("_", " "), "value": v} for k, v in info.items()
                          if k not in ("features", "notes")])
    return table(frame, {"property": "what the draft's config and weights say", "value": "its value"})


def engines_fed(rows, engine_record):
    """Notebook 02: what each engine record feeds the draft, in words (no True/False column)."""
    frame = pd.DataFrame([{"engine": r.engine, "version": engine_record(r.engine).boundary, "taps": r.spec,
                           "HF indices": r.hf_indices,
                           "serves this draft": "yes" if r.feasible else "no: " + r.explanation,
                           "how it reads the ids": r.explanation} for r in rows])
    return table(frame, {"engine": "the engine record (`workbench wiring --engines`)",
                         "version": "the engine versions this record stands for",
                         "taps": "the target hidden states it concatenates into the draft's fc, in order",
                         "HF indices": "the same taps as indices of HF output_hidden_states",
                         "serves this draft": "whether it can load and run the draft as configured (it may still feed "
                                              "taps the draft was not trained on: the warnings below)",
                         "how it reads the ids": "how the engine turns the draft config's ids into taps"})


def live_requests(cmp):
    """Notebook 04: one row per request in readable headers; the long fingerprint and per-step lists left out
    (the figures above show them), each wiring's offline decode and whether it reproduces the request, the wiring
    that reproduces the most requests first (at 800 px its columns are the ones in view)."""
    frame = cmp.to_frame()
    keep = [c for c in HEADERS if c in frame and c not in ("fingerprint", "seconds", "reply")]
    out = frame[keep].rename(columns=HEADERS)
    rank = {d["wiring"]: i for i, d in enumerate(cmp.ranking())}       # the wiring that reproduces most, first
    for c in sorted(cmp.candidates, key=lambda c: rank.get(c.spec, len(rank))):
        for col, name in ((f"offline {c.spec}", f"offline {c.spec}"), (f"status {c.spec}", f"{c.spec} reproduces")):
            if col in frame:
                out[name] = frame[col]
    key = {"row": "dataset row of the request", "source": "the row's data source",
           "prompt tokens": "prompt tokens sent", "output tokens": "tokens the server generated",
           "verify steps": "the server's verify steps for this request",
           "live accept length": "tokens per verify step of this request, read the same way from every reply",
           "server's own field": "the server's own accept-length field, as reported (— when it has none)",
           "accepted 0..K": "verify steps that accepted exactly 0, 1, ..., K drafts (— when not reported)"}
    for c in cmp.candidates:
        key[f"offline {c.spec}"] = f"the offline decode of the same request fed {c.spec}"
        key[f"{c.spec} reproduces"] = "identical / tie / differs: does that decode reproduce the request"
    return table(out, key)


__all__ = ["HEADERS", "ranking", "foreign", "draft", "engines_fed", "live_requests"]
