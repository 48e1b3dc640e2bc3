"""The answer first: what the server feeds, what it costs, the one fix with its command, where the evidence is.

    >>> a = Answer(feeds="SGLang feeds `L1,L3,L4`; the draft was trained on `embed,L1,L3`.",
    ...            cost="accept length 1.16 instead of 3.46", fix="rewire the draft", command="workbench rewire ...",
    ...            evidence="notebook 03")
    >>> print(a.markdown().splitlines()[0])
    **The answer.**

Every report page and ``workbench.diagnose(...).show()`` open with this block (issue 35): four lines a reader
can act on, then the evidence. Accept lengths in it are on the decode path (the chains a server verifies,
what it reports), each with its 95% interval, computed once per result (``AcceptanceResult.intervals``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from workbench.analysis.diagnose import RECOVERY_ENOUGH, rewire_command, samples_to_decide
from workbench.engines.candidates import config_ids, engine_label, where_ids_go



@dataclass
class Answer:
    """Four lines and a command: ``feeds``, ``cost``, ``fix``, ``command`` (shell, may be empty), ``evidence``."""

    feeds: str
    cost: str
    fix: str
    command: str
    evidence: str
    kind: str = ""            # the diagnosis' fix kind: none | ids | rewire | retrain | undecided | engine
    note: str = ""            # one more sentence (a stand-in server, a noisy timing), shown above the lines

    def markdown(self) -> str:
        lines = ["**The answer.**", ""]
        if self.note:
            lines += [f"> {self.note}", ""]
        lines += [f"- **What the server feeds:** {self.feeds}", f"- **What it costs:** {self.cost}",
                  f"- **The fix:** {self.fix}"]
        if self.command:
            lines += ["", "```bash", self.command, "```", ""]
        lines.append(f"- **The evidence:** {self.evidence}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The block for the report index (``record_headline``): it shows it above the cards."""
        return {"the server feeds": self.feeds, "what it costs": self.cost, "the fix": self.fix,
                "command": self.command, "the evidence": self.evidence, **({"note": self.note} if self.note else {})}

    def text(self) -> str:
        """The same block as plain text (a terminal)."""
        out = [f"note: {self.note}"] if self.note else []
        out += [f"the server feeds: {self.feeds}", f"what it costs: {self.cost}", f"the fix: {self.fix}"]
        out += [f"    {self.command}"] if self.command else []
        return "\n".join(out + [f"the evidence: {self.evidence}"]).replace("`", "").replace("**", "")

    def _repr_markdown_(self) -> str:
        return self.markdown()


class Markdown(str):
    """Text a notebook shows as markdown (the last value of a cell)."""

    def _repr_markdown_(self) -> str:
        return str(self)


def interval_text(result) -> str:
    """``1.16 [95% 1.07–1.26]``: a decode-path accept length with its interval (computed once per result)."""
    lo, hi = result.intervals()["decode_path_accept_length"]
    x = result.decode_path["accept_length"]
    return f"{x:.2f} [95% {lo:.2f}–{hi:.2f}]" if not math.isnan(lo) else f"{x:.2f}"


def ids_command(draft_path, engine: str, ids) -> str:
    """A one-line shell command that writes ``ids`` where ``engine`` reads them in the draft's config.json.

        >>> ids_command("d/draft", "sglang", [1, 2, 3])  # doctest: +ELLIPSIS
        'python -c \\'import json; p = "d/draft/config.json"; c = json.load(open(p)); c.setdefault("eagle_config", {})...'
    """
    p = json.dumps(str(Path(draft_path or "<draft>") / "config.json"))
    where = ('c.setdefault("eagle_config", {})' if where_ids_go(engine).startswith("eagle_config.") else "c")
    return (f"python -c 'import json; p = {p}; c = json.load(open(p)); "
            f"{where}[\"eagle_aux_hidden_state_layer_ids\"] = {list(ids)}; json.dump(c, open(p, \"w\"), indent=2)'")


def ids_fix(engine: str, spec: str, ids, draft_path) -> tuple[str, str]:
    """(the fix in words, its command) when ``engine`` feeds ``spec`` once the draft's config holds ``ids``: the one
    wording of the one-line fix, on every page that names it (offline or live).

        >>> ids_fix("vllm", "embed,L1,L7", [0, 2, 8], "d")[0]
        "set `eagle_aux_hidden_state_layer_ids (top level)` to `[0, 2, 8]` in the draft's config.json, so that vLLM V1 (current) feeds `embed,L1,L7`."
    """
    return (f"set `{where_ids_go(engine)}` to `{list(ids)}` in the draft's config.json, so that "
            f"{engine_label(engine)} feeds `{spec}`.", ids_command(draft_path, engine, ids))


#: what an offline answer says of tokens/s (issue 48: measured, or said to be not measured)
NO_SPEED = "Tokens/s: not measured here (`workbench vllm speed` measures them on a real vLLM; notebook 04)."


def setting_words(engine: str, setting) -> str:
    """The engine and the drafting setting an answer's numbers hold in, with the flags that select it.

        >>> from workbench.core.setting import Setting
        >>> setting_words("sglang", Setting(steps=4))
        'SGLang (current), chain drafting K=4 (--speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5)'
        >>> setting_words("vllm", Setting(steps=4))
        'vLLM V1 (current), chain drafting K=4 (num_speculative_tokens 4)'
    """
    E = engine_label(engine)
    if setting.shape == "chain":
        shape = f"chain drafting K={setting.steps}"
        flags = (f"num_speculative_tokens {setting.steps}" if str(engine).startswith("vllm") else
                 f"--speculative-num-steps {setting.steps} --speculative-eagle-topk 1 "
                 f"--speculative-num-draft-tokens {setting.steps + 1}")
    else:
        shape = f"tree drafting {setting.steps}×{setting.eagle_topk}, {setting.num_draft_tokens} tokens"
        flags = ("vLLM drafts chains only: no flag serves this tree" if str(engine).startswith("vllm") else
                 f"--speculative-num-steps {setting.steps} --speculative-eagle-topk {setting.eagle_topk} "
                 f"--speculative-num-draft-tokens {setting.num_draft_tokens}")
    return f"{E}, {shape} ({flags})"


def answer_for(dx, rewired=None, *, evidence: str = "", speed: str = "") -> Answer:
    """The :class:`Answer` of a :class:`workbench.analysis.diagnose.Diagnosis` (after ``dx.advise(rewired)``).
    ``speed``: what a real server measured for this draft, in words (``vllm_speed.measured_words``); without it the
    cost says tokens/s were not measured (:data:`NO_SPEED`)."""
    tps = f"Tokens/s {speed}." if speed else NO_SPEED
    E, e, t = engine_label(dx.engine), dx.engine_wiring, dx.trained_wiring
    res, est = dx.results, dx.setting.accept_label("decode-path")
    ev = evidence or "the diagnosis below (every candidate wiring, ranked)"
    if e is None or not dx.engine_feasible or e not in res:
        feeds = f"{E} cannot serve this draft as configured: {dx.engine_explanation}."
        return Answer(feeds, "the server cannot run it as it is.", dx.verdict, "", ev, dx.fix)
    trained = f"the taps it was trained on, `{t}`" if t and t != e else "the taps it was trained on"
    feeds = (f"{E} feeds the draft `{e}`; " + (f"it was trained on `{t}`." if t and t != e else
                                               "the same taps it was trained on." if t else
                                               "the draft config does not say what it was trained on."))
    where = setting_words(dx.engine, dx.setting)
    if t and t != e and t in res:
        b, a = res[e].decode_path["accept_length"], res[t].decode_path["accept_length"]
        cost = (f"accept length {interval_text(res[e])} instead of {interval_text(res[t])} with {trained}: {abs(b - a) / a:.0%} "
                f"{'fewer' if b < a else 'more'} tokens per verify step, {where}. Both: {est}, what a server "
                f"reports. {tps}")
    else:
        cost = f"nothing measurable: accept length {interval_text(res[e])}, {where}; {est} (what a server reports). {tps}"
    fix, command = _fix(dx, rewired)
    return Answer(feeds, cost, fix, command, ev, dx.fix)


def _fix(dx, rw) -> tuple[str, str]:
    E, e, t, kind = engine_label(dx.engine), dx.engine_wiring, dx.trained_wiring, dx.fix
    if kind == "none":
        return "none needed: the server feeds a wiring as good as the best one found.", ""
    if kind == "undecided":
        st = dx.stats()
        need = samples_to_decide(st, dx.best, e, dx.n_samples) if dx.best in st and e in st else None
        more = f"about {need} samples (now {dx.n_samples}) would decide" if need else "more samples would decide"
        return f"none yet: the data cannot tell `{e}` from the best wiring found, `{dx.best}`; {more}.", ""
    if kind == "ids":        # the trained taps if the engine can be given them, else the best wiring it can feed
        st = dx.stats()
        order = ([t] if t in st else []) + sorted((x for x in st if x != t), key=lambda x: -st[x]["accept_length"])
        found = ((x, config_ids(dx.engine, tuple(x.split(",")), dx.target_config)) for x in order)
        spec, ids = next(((x, i) for x, i in found if i is not None), (None, None))
        if spec is None:
            return dx.verdict, ""
        return ids_fix(dx.engine, spec, ids, dx.paths.get("draft"))
    command = rewire_command(dx.paths, dx.engine)
    if kind == "rewire" and rw is not None:
        b, a, r = (x.decode_path["accept_length"] for x in (rw.before, rw.after, rw.reference))
        out = command.split(" --out ")[1].split(" ")[0]
        return (f"rewire the draft: refit its `fc` so that `{e}` stands in for `{t}`, then serve `{out}`. Measured "
                f"here: {rw.recovered:.1%} of the gap recovered (accept length {b:.2f} → {a:.2f}, the trained taps "
                f"{r:.2f}, on the decode path).", command)
    if kind == "rewire":
        return (f"rewire the draft: refit its `fc` so that `{e}` stands in for `{t}` (not measured here: the command "
                f"measures it; if it recovers under {RECOVERY_ENOUGH:.0%} of the gap, retrain on `{e}`).", command)
    if kind == "retrain":
        why = (f" (the rewire recovered only {rw.recovered:.1%} of the gap)" if rw is not None else "")
        return f"retrain the draft on the taps {E} feeds, `{e}`{why}.", ""
    return dx.verdict, ""


__all__ = ["Answer", "Markdown", "answer_for", "interval_text", "ids_command", "ids_fix", "setting_words", "NO_SPEED"]
