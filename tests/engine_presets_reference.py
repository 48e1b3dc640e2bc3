"""An independent reference for the engine records: the wiring presets as written before engines.py
(issue 16 phase 1 checked the records against them). Copied from workbench/wiring.py at the merge of
phase 1; it knows two SGLang rules ("classic" = before PR #25454, "first-id-1" = after) and the
vLLM of before the embed/last-layer change. tests/test_engines.py compares the records with it where
the versions agree. Not used by the package.
"""

from workbench.engines.taps import Resolution, draft_layer_ids, hf_to_tap, num_layers, tap_to_hf

_KEY = "eagle_aux_hidden_state_layer_ids"


def _fmt(ids) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


def _before_layers(engine: str, before: list[int], n: int, warnings: list[str]):
    """Capture-before-layer engines: the loop visits layers in ascending order, once each."""
    taps, feasible = [], True
    wanted = sorted(set(before))
    if len(wanted) < len(before):
        warnings.append(f"{engine}: duplicate capture points {_fmt(before)} are captured once each "
                        f"(the draft's fc expects {len(before)} states, gets {len(wanted)})")
        feasible = False
    if list(before) != wanted and len(wanted) == len(before):
        warnings.append(f"{engine}: concatenates in layer order {_fmt(wanted)}, not list order {_fmt(before)}")
    for b in wanted:
        if b == 0:
            taps.append("embed")
            warnings.append(f"{engine}: capture before layer 0 would be the embedding, which {engine} cannot "
                            f"feed (residual is None before layer 0: crash)")
            feasible = False
        elif 1 <= b <= n - 1:
            taps.append(f"L{b - 1}")
        else:
            warnings.append(f"{engine}: capture point {b} is past the last layer (valid 1..{n - 1} for N={n}): "
                            f"never captured, fc gets fewer states than it expects (crash or garbage)")
            feasible = False
    return tuple(taps), feasible


def _layer_outputs(engine: str, ids: list[int], n: int, warnings: list[str]):
    """Layer-output engines (SpecForge, ModelOpt): id k means the output of layer k, list order."""
    taps, feasible = [], True
    for k in ids:
        if 0 <= k < n:
            taps.append(f"L{k}")
            if k == n - 1:
                warnings.append(f"{engine}: id {k} is the last layer's raw output L{k}: an HF "
                                f"output_hidden_states read gets the post-norm 'final' instead")
        else:
            warnings.append(f"{engine}: id {k} is not a layer of the target (valid 0..{n - 1} for N={n})")
            feasible = False
    return tuple(taps), feasible


def preset_resolve(engine: str, target_config, draft_config=None, *, sglang_rule: str = "classic") -> Resolution:
    """The taps ``engine`` feeds for this target (N layers) and draft config (facts page, section 1).

        >>> r = resolve("sglang", {"num_hidden_layers": 32},
        ...             {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}})
        >>> r.taps, r.explanation
        (('L1', 'L3', 'L4'), 'sglang: eagle_config ids [1,3,4] +1 → capture before layers [2,4,5] → L1,L3,L4')
        >>> resolve("vllm", 32).spec          # default (2, N//2, N-3), before-layer capture
        'L1,L15,L28'

    engines: sglang, vllm, eagle, specforge, modelopt, hf. ``sglang_rule``: "classic" (+1 always) or
    "first-id-1" (SGLang PR #25454: +1 only when the first id is 1).
    """
    n = num_layers(target_config)
    ids = draft_layer_ids(draft_config)
    nested, top = ids["nested"], ids["top"]
    default_before = [2, n // 2, n - 3]
    default_out = [1, n // 2 - 1, n - 4]
    w: list[str] = []

    if engine == "sglang":
        rule = "" if sglang_rule == "classic" else " (rule: +1 only when the first id is 1)"
        if top is not None and nested is None:
            w.append(f"sglang: ignores the top-level {_KEY} {_fmt(top)} (it reads only eagle_config.{_KEY}) "
                     f"and silently uses its default")
        elif top is not None and nested is not None and top != nested:
            w.append(f"sglang: reads eagle_config ids {_fmt(nested)}; the top-level ids {_fmt(top)} differ "
                     f"and are ignored")
        if nested is not None:
            shift = 1 if sglang_rule == "classic" or (nested and nested[0] == 1) else 0
            before = [i + shift for i in nested]
            how = f"eagle_config ids {_fmt(nested)} {'+1' if shift else 'as is (first id is not 1)'}"
        else:
            before = default_before
            how = "no eagle_config ids → default" if top is None else "top-level ids ignored → default"
        taps, ok = _before_layers("sglang", before, n, w)
        expl = f"sglang: {how} → capture before layers {_fmt(before)} → {','.join(taps) or '(nothing)'}{rule}"
    elif engine == "vllm":
        chosen, src = (top, "top-level ids") if top else (nested, "eagle_config ids") if nested else (None, "")
        if chosen is None:
            before, how = default_before, "no ids → default"
        else:
            before, how = chosen, f"{src} {_fmt(chosen)} as is (no +1)"
            if src == "eagle_config ids":
                w.append("vllm: older vLLM releases read only the top-level key and would use the default "
                         f"{_fmt(default_before)}")
        if top and nested and top != nested:
            w.append(f"vllm: uses the top-level ids {_fmt(top)}; eagle_config ids {_fmt(nested)} differ and are ignored")
        taps, ok = _before_layers("vllm", before, n, w)
        expl = f"vllm: {how} → capture before layers {_fmt(before)} → {','.join(taps) or '(nothing)'}"
    elif engine == "eagle":
        before = default_before
        if nested is not None or top is not None:
            w.append("eagle: the official EAGLE repo ignores the draft config's layer ids (fixed {2, N//2, N-3})")
        taps, ok = _before_layers("eagle", before, n, w)
        expl = f"eagle: fixed capture before layers {_fmt(before)} → {','.join(taps)}"
    elif engine in ("specforge", "modelopt"):
        if nested is not None:
            chosen, how = nested, f"eagle_config ids {_fmt(nested)} = layer outputs"
        elif engine == "modelopt" and top is not None:
            chosen, how = top, f"top-level ids {_fmt(top)} = layer outputs"
        else:
            chosen, how = default_out, f"default layer outputs {_fmt(default_out)}"
            if top is not None:
                w.append(f"{engine}: ignores the top-level {_KEY} {_fmt(top)}")
        taps, ok = _layer_outputs(engine, chosen, n, w)
        expl = f"{engine}: {how} → {','.join(taps) or '(nothing)'}"
    else:  # hf: plain output_hidden_states indices
        chosen = nested if nested is not None else top
        if chosen is None:
            chosen, how = default_before, f"default hidden_states indices {_fmt(default_before)}"
        else:
            how = f"ids {_fmt(chosen)} read as hidden_states indices"
        taps, ok = [], True
        for i in chosen:
            if 0 <= i <= n:
                taps.append(hf_to_tap(i, n))
            else:
                w.append(f"hf: hidden_states index {i} is out of range (valid 0..{n} for N={n})")
                ok = False
        taps = tuple(taps)
        if "final" in taps:
            w.append(f"hf: hidden_states[{n}] is the post-norm 'final', not the raw output of layer L{n - 1}")
        expl = f"hf: {how} → {','.join(taps) or '(nothing)'}"

    if "embed" in taps and engine in ("specforge", "modelopt", "hf"):
        w.append(f"{engine}: feeds the embedding; no serving engine (sglang, vllm) can feed 'embed'")
    if len(taps) != 3:   # an EAGLE-3 fc takes exactly three target states (low, mid, high)
        w.append(f"{engine}: feeds {len(taps)} hidden states ({','.join(taps) or 'none'}); an EAGLE-3 draft's fc "
                 f"expects exactly 3 (expected 3 layer ids)")
        ok = False
    return Resolution(engine, tuple(taps), [tap_to_hf(t, n) for t in taps], expl, w, ok)


