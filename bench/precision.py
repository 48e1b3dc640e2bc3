"""How often a live comparison misreads the served precision, or names a wrong wiring, on a real vLLM (issue 47).

    $ .venv/bin/python -m bench.precision                     # the smoke demo; writes bench/precision-misreading.json
    $ .venv/bin/python -m bench.precision --requests 80 --subsets 60 --json /tmp/p.json
    $ .venv/bin/python -m bench.precision --docs                  # docs/vllm.md's table from the file

Two real vLLM servers (``.venv-vllm``, ``--enforce-eager``), one at ``--dtype bfloat16`` and one at ``float32``,
serve the smoke demo's ``draft-mismatched`` (nested ids [1, 3, 4]: vLLM feeds ``L0,L2,L3``). One
``vllm compare`` each, over ``--requests`` rows (``val.jsonl``, then ``train.jsonl``: prompts only matter),
with the precision inferred. The requests are split in two halves:

- the **fit** half (the second): the bfloat16 server's per-request keep rate (requests with a bfloat16 near-tie
  and no flip at one, of requests with a near-tie), the measurement
  :data:`workbench.live.precision.BF16_MEASURED` is set from (the request is the rule's unit);
- the **judged** half (the first): for each subset size 2, 4, 8, 16, 32, ``--subsets`` random subsets of those
  requests (seeded) are judged again exactly as ``compare`` judges them (:func:`subset`), and counted:

- how often the precision is decided, and decided wrong (float32 for the bfloat16 server, or the reverse);
- how often a wiring is named, and how often the named wiring is not the served one (``L0,L2,L3``).

Also the per-tie keep rate of the bfloat16 server over all its requests (near-ties kept / near-ties): the
measurement over all requests. Numbers are measured, never asserted. The rule is never judged on the requests its
rate was fitted on.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.common import splice

from workbench.core.errors import WorkbenchError
from workbench.core.files import write_json

OUT = Path(__file__).resolve().parent / "precision-misreading.json"
DOC = Path(__file__).resolve().parents[1] / "docs" / "vllm.md"
BEGIN = "<!-- bench.precision:begin -->"
END = "<!-- bench.precision:end -->"

SERVED = "L0,L2,L3"
SIZES = (2, 4, 8, 16, 32)


def subset(cmp, idx: list[int]):
    """The comparison of ``cmp`` restricted to requests ``idx`` (pooled counters dropped: they counted them all)."""
    from workbench.live.comparison import offline_results

    samples = [cmp.samples[i] for i in idx]
    reqs = {k: [v[i] for i in idx] for k, v in cmp.requests.items()}
    return replace(cmp, samples=samples, requests=reqs, aggregate=None,
                   offline=offline_results(reqs, samples, cmp.K, cmp.setting))


def judge(cmp, pool: list[int], sizes=SIZES, n_subsets: int = 60, seed: int = 0) -> dict:
    """Per subset size, ``n_subsets`` random subsets of the requests ``pool``, judged as ``compare`` judges."""
    rng = random.Random(seed)
    out = {}
    for size in sizes:
        if size > len(pool):
            continue
        rows = {"subsets": 0, "decided": 0, "float32": 0, "bfloat16": 0, "named": 0, "named_wrong": 0,
                "undecided_verdict": 0}
        for _ in range(n_subsets):
            c = subset(cmp, sorted(rng.sample(pool, size)))
            p = c.precision
            rows["subsets"] += 1
            if p.decided:
                rows["decided"] += 1
                rows[p.dtype] += 1
            if c.matched is not None:
                rows["named"] += 1
                rows["named_wrong"] += c.matched != SERVED
            rows["undecided_verdict"] += c.verdict_code == "undecided"
        out[str(size)] = rows
    return out


def rows_file(demo: Path, n: int, folder: Path) -> Path:
    lines = (demo / "val.jsonl").read_text().splitlines() + (demo / "train.jsonl").read_text().splitlines()
    path = folder / "requests.jsonl"
    path.write_text("\n".join(lines[:n]) + "\n")
    return path


def measure(demo: Path, n_requests: int = 80, n_subsets: int = 60, *, say=print) -> dict:
    """The benchmark's result (what ``--json`` holds): one ``vllm compare`` per served dtype, split and judged."""
    from workbench.live.vllm_live import compare
    from workbench.live.vllm_server import running_server

    demo = Path(demo)
    result = {"demo": str(demo), "draft": "draft-mismatched", "served": SERVED, "requests": n_requests,
              "subsets_per_size": n_subsets, "servers": {}}
    with tempfile.TemporaryDirectory(prefix="wb-precision-") as tmp:
        data = rows_file(demo, n_requests, Path(tmp))
        for dtype in ("bfloat16", "float32"):
            t0 = time.time()
            with running_server(demo / "target", demo / "draft-mismatched", k=4, enforce_eager=True, dtype=dtype,
                                log=Path(tmp) / f"vllm-{dtype}.log", timeout=600) as srv:
                cmp = compare(srv.url, demo / "target", demo / "draft-mismatched", data, probe=0, progress=False)
            ev = cmp.precision_evidence()
            n = len(cmp.samples)
            judged, fit = list(range(n // 2)), list(range(n // 2, n))
            fev = subset(cmp, fit).precision_evidence()
            result["servers"][dtype] = {
                "all": {"requests": n, "verdict": cmp.verdict_code, "wiring": cmp.matched,
                        "precision": cmp.precision.to_dict(), "evidence": ev,
                        "keep_rate_ties": (ev["ties"] - ev["tie_flips"]) / ev["ties"] if ev["ties"] else None,
                        "keep_rate_requests": (ev["tied"] - ev["flipped"]) / ev["tied"] if ev["tied"] else None},
                "fit": {"requests": [fit[0], fit[-1] + 1], "evidence": fev,
                        "measured": [fev["tied"], fev["flipped"]]},
                "judged": [judged[0], judged[-1] + 1],
                "by_subset_size": judge(cmp, judged, n_subsets=n_subsets), "seconds": round(time.time() - t0, 1)}
            say(json.dumps({dtype: result["servers"][dtype]}, indent=1))
    return result


def _decided(rows: dict) -> str:
    got = [f"{rows[d]} {d}" if rows["bfloat16"] and rows["float32"] else d for d in ("bfloat16", "float32") if rows[d]]
    return f"{rows['decided']}/{rows['subsets']}" + (f" ({', '.join(got)})" if got else "")


def render(result: dict) -> str:
    """docs/vllm.md's misreading table and what it shows, from ``result`` (``bench/precision-misreading.json``)."""
    from workbench.live.precision import REQUESTS_TO_DECIDE, keep_rate_bound

    other = {"bfloat16": "float32", "float32": "bfloat16"}
    lines = ["| server | requests in a subset | precision decided | decided wrong | wiring named | wrong wiring named |",
             "|---|---|---|---|---|---|"]
    servers = result["servers"]
    for dtype, s in servers.items():
        for size, r in s["by_subset_size"].items():
            lines.append(f"| {dtype} | {size} | {_decided(r)} | {r[other[dtype]]} | {r['named']}/{r['subsets']} | "
                         f"{r['named_wrong']} |")
    for dtype, s in servers.items():
        a, ev = s["all"], s["all"]["evidence"]
        p = a["precision"]
        if p["decided"] and p["dtype"] == "bfloat16":
            why = (f"bfloat16 ({ev['tie_flips']} flips at {ev['ties']} near-ties, in {ev['flipped']} of {ev['tied']} "
                   f"requests with a near-tie)")
        elif p["decided"]:
            why = f"float32 (no flip in the {ev['tied']} requests with a near-tie)"
        else:
            why = f"undecided ({ev['flipped']} of {ev['tied']} requests with a near-tie flipped)"
        wrong_p = int(bool(p["decided"]) and p["dtype"] != dtype)
        named = f"`{a['wiring']}`" if a["wiring"] else "none"
        wrong_w = int(a["wiring"] is not None and a["wiring"] != result["served"])
        lines.append(f"| {dtype}, all {a['requests']} | {a['requests']} | {why} | {wrong_p} | {named} | {wrong_w} |")
    size_rows = [r for s in servers.values() for r in s["by_subset_size"].values()]
    wrong = sum(r["named_wrong"] for r in size_rows)
    b16, f32 = servers.get("bfloat16"), servers.get("float32")
    text = []
    if b16:
        called = sum(r["float32"] for r in b16["by_subset_size"].values())
        small = [k for k in b16["by_subset_size"] if int(k) <= 4]
        text.append("A bfloat16 server is " + ("never called float32" if not called else
                                               f"called float32 in {called} subsets") +
                    (f" (at {small[0]}–{small[-1]} requests its precision is undecided or, at a flip, bfloat16)"
                     if small and not called else "") + ";")
    if f32:
        by = f32["by_subset_size"]
        dec = [(k, r) for k, r in by.items() if r["float32"]]
        wrong16 = sum(r["bfloat16"] for r in by.values())
        text.append(f"a float32 server is called float32 only once {REQUESTS_TO_DECIDE} of its requests with a "
                    f"near-tie have shown no flip (" + (", ".join(f"{r['float32']} of the {k}-request subsets"
                                                                   for k, r in dec) or "in no subset") +
                    "), and is otherwise undecided" + (", never bfloat16." if not wrong16 else
                                                       f"; called bfloat16 in {wrong16} subsets."))
    text.append(f"{'No subset named a wrong wiring (0 %' if not wrong else f'{wrong} subsets named a wrong wiring ('}"
                f" at every size; the bound is 5 %).")
    if b16:
        ev, fev = b16["all"]["evidence"], b16["fit"]["evidence"]
        tied, flipped = ev["tied"] - fev["tied"], ev["flipped"] - fev["flipped"]
        if tied:
            text.append(f"The judged half's bfloat16 server kept the argmax in {tied - flipped} of its {tied} requests "
                        f"with a near-tie ({(tied - flipped) / tied:.2f}), "
                        + ("inside" if (tied - flipped) / tied <= keep_rate_bound() else "above")
                        + f" the bound the rule uses ({keep_rate_bound():.3f}).")
    return "\n".join(lines) + "\n\n" + "\n".join(_wrap(" ".join(text)))


def _wrap(text: str, width: int = 116) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", default="tests/data/smoke-demo")
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--subsets", type=int, default=60)
    ap.add_argument("--json", default=str(OUT), help="where to write (default bench/precision-misreading.json, "
                    "which also rewrites docs/vllm.md's table)")
    ap.add_argument("--docs", action="store_true", help="only rewrite docs/vllm.md's table from --json")
    args = ap.parse_args(argv)
    try:
        if args.docs:
            result = json.loads(Path(args.json).read_text())
        else:
            result = measure(Path(args.demo), args.requests, args.subsets)
            write_json(args.json, result, indent=1)
            print(f"wrote {args.json}")
        if args.docs or Path(args.json).resolve() == OUT:
            splice(DOC, BEGIN, END, render(result))
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
