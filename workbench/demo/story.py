"""The demo's story: the numbers the build measures and prints (mismatched vs aligned, per seed).

    >>> # print(story_table(read_manifest("data/demo")))

``measure_story`` runs the decode-path accept length of both drafts under their own taps and under SGLang's
reading; ``summary`` and ``story_table`` print them from ``manifest.json``.
"""

from __future__ import annotations

from pathlib import Path

from workbench import rows as data
from workbench.core.setting import Setting
from workbench.demo.recipe import SOURCES, demo_taps
from workbench.load import inputs
from workbench.model import capture, checkpoint
from workbench.simulate import acceptance
from workbench.stats.tap_stats import tap_statistics


def summary(manifest: dict) -> str:
    """A few readable lines about a built demo (what ``workbench demo`` prints)."""
    t = manifest.get("target", {})
    tm = manifest.get("timings", {})
    cpu = f" ({tm['cpu_total']:.1f} s CPU)" if "cpu_total" in tm else ""
    model = manifest.get("model")
    what = (f"{model.get('package')}=={model.get('version')} ({model.get('weights')})" if model
            else f"final loss {t.get('final_loss')}")
    lines = [f"demo ({manifest.get('size')}, seed {manifest.get('seed')}) built in {tm.get('total', 0):.1f} s{cpu}",
             f"  target: LlamaForCausalLM, N={t.get('n_layers')} layers, H={t.get('hidden_size')}, "
             f"vocab {t.get('vocab_size')}, {what}",
             f"  data: train.jsonl {manifest.get('data', {}).get('n_train')} rows, "
             f"val.jsonl {manifest.get('data', {}).get('n_val')} rows, sources "
             f"{', '.join(manifest.get('data', {}).get('sources') or SOURCES)}"]
    more = [k for k in manifest.get("file_notes", {}) if k not in ("train.jsonl", "val.jsonl")]
    if more:
        lines.append(f"  more data on val's prompts: {', '.join(more)} (manifest file_notes; data/README.md)")
    for name, d in manifest.get("drafts", {}).items():
        acc = ", ".join(f"{a:.2f}" for a in d.get("acc_per_step", []))
        lines.append(f"  {name}: trained on {','.join(d.get('trained_taps', []))}, config ids "
                     f"{d.get('layer_ids')} (SGLang serves {','.join(d.get('sglang_taps', []))}); "
                     f"final loss {d.get('final_loss')}, train acc per step [{acc}]")
    if manifest.get("story"):
        st = manifest["story"]
        label = st.get("metric") or f"accept length (decode path, chain K={st.get('K')}, greedy, bonus counted)"
        lines += [f"  story: {label} on {st.get('data')}", "", story_table(manifest)]
    bar = manifest.get("bar")
    if bar:
        lines.append(f"\n  the bar: draft-aligned >= {bar['aligned_min']} (measured {bar['aligned']:.2f}), draft-mismatched on "
                     f"SGLang's taps <= {bar['mismatched_max_ratio']:.0%} of its own (measured {bar['mismatched_ratio']:.0%}): "
                     f"{'met' if bar['met'] else 'NOT met'}")
    for name, points in (manifest.get("frontier") or {}).items():
        pts = ", ".join(f"epoch {e}: {p['own_taps']:.2f} own / {p['sglang_taps']:.2f} SGLang's at {p['build_minutes']:.1f} min"
                        for e, p in sorted(points.items(), key=lambda x: int(x[0])))
        lines.append(f"  frontier draft-{name}: {pts}")
    return "\n".join(lines)



def story_table(manifest: dict) -> str:
    """The demo's story as a markdown table, from a manifest's measured ``story`` (what
    ``workbench demo`` prints; the README quotes ranges over seeds, a build prints its own numbers).

        >>> m = {"size": "smoke", "seed": 0, "target": {"n_layers": 8, "hidden_size": 32},
        ...      "story": {"trained": "embed,L1,L3", "sglang": "L1,L3,L4",
        ...                "draft-mismatched": {"own_taps": 3.2, "sglang_taps": 1.6},
        ...                "draft-aligned": {"own_taps": 3.4, "sglang_taps": 3.4}}}
        >>> print(story_table(m))
        | demo smoke (N=8, H=32, seed 0) | fed its training taps | fed SGLang's `L1,L3,L4` |
        |---|---|---|
        | `draft-mismatched` (trained on `embed,L1,L3`) | 3.20 | 1.60 (-50%) |
        | `draft-aligned` (trained on `L1,L3,L4`) | 3.40 | 3.40 |
    """
    st, t = manifest["story"], manifest.get("target", {})
    rows = [f"| demo {manifest.get('size')} (N={t.get('n_layers')}, H={t.get('hidden_size')}, "
            f"seed {manifest.get('seed')}) | fed its training taps | fed SGLang's `{st['sglang']}` |", "|---|---|---|"]
    for name, taps in (("draft-mismatched", st["trained"]), ("draft-aligned", st["sglang"])):
        own, served = st[name]["own_taps"], st[name]["sglang_taps"]
        change = f" ({served / own - 1:+.0%})" if name == "draft-mismatched" and own else ""
        rows.append(f"| `{name}` (trained on `{taps}`) | {own:.2f} | {served:.2f}{change} |")
    return "\n".join(rows)



def tap_stats(target, rows, taps) -> dict:
    """Per-tap mean L2 norm and mean cosines between taps over the real tokens of ``rows``.

        >>> tap_stats(target, val_rows, ["embed", "L1", "L3", "L4"])["norm"]   # doctest: +SKIP
        {'embed': 0.14, 'L1': 2.9, 'L3': 4.1, 'L4': 4.6}

    ``cos_next[tap]``: cosine with the next tap in the given order; ``slots``: cosine between each
    tap the mismatched draft was trained on and the tap SGLang feeds in that slot; ``slots_centered``:
    the same after subtracting each tap's mean vector (the part that varies with the context; a
    large shared component makes raw cosines look close to 1). Meant for demo-sized data (held in memory).
    """

    story = demo_taps(target.n_layers)
    wanted = list(dict.fromkeys(list(taps) + story["mismatched"] + story["aligned"]))
    return tap_statistics(capture.extract(target, rows, wanted, batch_size=32, progress=False), wanted,
                                     centered=True).story(taps, list(zip(story["mismatched"], story["aligned"])))



def response_stats(rows) -> dict:
    """How varied the target's greedy responses are: mean share of distinct tokens per response,
    mean longest run of one repeated token, and rows whose response is a single token repeated."""
    distinct, runs, single = [], [], 0
    for row in rows:
        resp = row["input_ids"][row["n_prompt_tokens"]:]
        distinct.append(len(set(resp)) / max(1, len(resp)))
        best = cur = 1
        for a, b in zip(resp, resp[1:]):
            cur = cur + 1 if a == b else 1
            best = max(best, cur)
        runs.append(best)
        single += len(set(resp)) == 1
    return {"distinct_share": round(sum(distinct) / len(rows), 3), "longest_run": round(sum(runs) / len(rows), 2),
            "single_token_rows": single}



def measure_story(out, K: int = 4, seed: int = 0, target=None) -> dict:
    """Decode-path accept length of each demo draft under its training taps and SGLang's taps on
    ``val.jsonl`` (``acceptance.simulate``, chain, greedy, bonus token counted).

        >>> measure_story("data/demo", K=4)["draft-mismatched"]["loss"]   # doctest: +SKIP
        0.41
    """

    out = Path(out)
    target = target if target is not None else inputs.target(out / "target", device="cpu")
    taps = demo_taps(target.n_layers)
    ds = data.load(out / "val.jsonl")
    story = {"K": int(K), "seed": int(seed), "data": "val.jsonl",
             "metric": Setting(steps=int(K)).accept_label("decode-path"),
             "trained": ",".join(taps["mismatched"]), "sglang": ",".join(taps["aligned"])}
    for name in ("draft-mismatched", "draft-aligned"):
        d = checkpoint.load_draft(out / name, target)
        res = acceptance.simulate(target, d, ds, [",".join(taps["mismatched"]), ",".join(taps["aligned"])],
                                  K=int(K), progress=False, acc_topk=0, seed=seed)
        acc = {spec: round(float(r.decode_path["accept_length"]), 4) for spec, r in res.items()}
        own = acc[",".join(taps["mismatched" if name == "draft-mismatched" else "aligned"])]
        served = acc[",".join(taps["aligned"])]
        story[name] = {"accept_length": acc, "own_taps": own, "sglang_taps": served,
                       "loss": round(1 - served / own, 4) if own else None}
    return story
