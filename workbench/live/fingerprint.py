"""Per-request fingerprints of a live SGLang server: what each ``/generate`` reply reports about its
verify steps, and what a server on each candidate wiring would have reported for that same request.

    >>> steps = server_steps([2, 0, 3], n_output=6)        # A per verify step, 6 tokens returned
    >>> reported({"verify_ct": 3, "accepted_drafts": 5, "histogram": [1, 0, 1, 1]}, steps, "v2")
    {'verify_ct': 3, 'accepted_drafts': 5, 'histogram': [1, 0, 1, 1]}
    >>> reported({"verify_ct": 3, "accepted_drafts": 3}, steps, "v1")        # last step cut at the finish
    {'verify_ct': 3, 'accepted_drafts': 3}
    >>> sign_test(9, 1)                                                      # exact, two-sided
    0.021484375

How a server decodes one request (``acceptance.exact_decode``, ``tree_verify.exact_tree_decode``):
the prefill emits the first output token (``completion_tokens`` counts it, no verify step); each
verify step at t (root x_{t+1}) accepts A drafts and emits A + 1 tokens; steps go on while fewer
than ``max_new_tokens`` tokens were emitted, so the last step may run past the end (its extra tokens
are cut). The histogram and accepted-draft count of the last step: the v2 worker (SGLang's only
EAGLE worker now) counts the raw A, the v1 worker A after the cut (facts page section 4).

Offline, the request's own row (prompt + the server's output + the target's greedy continuation of
``steps`` + 1 tokens, so the last verify step can look past the end) goes through ONE target pass;
the draft drafts every chain (``draft.run_chains``) or tree (``tree.draft_trees``) at once, and
acceptance is judged against **the server's own output tokens** (the target's argmax on the server is
what produced them), so target-side float differences cannot move it. The server's decode is then
walked from t = n_prompt - 1 (:func:`offline_requests`). ``exact_requests`` is the exact reference
(the real decode loop on the prompt), tested to agree on the stand-in.

Fingerprint of a reply = the per-request fields it carries, among ``verify_ct``
(``spec_verify_ct``), ``accepted_drafts`` (``spec_accept_token_num`` / ``spec_accepted_drafts`` /
``spec_num_correct_drafts``) and ``histogram`` (``spec_accept_histogram`` /
``spec_correct_drafts_histogram``, trailing zeros ignored: SGLang grows it only as far as needed).
vLLM's ``detailed`` per-request metrics add ``per_step_accepted`` (A per verify step, in order: the
strongest fingerprint) and ``per_step_drafted`` (kept in the fingerprint only when some step drafted
fewer than the others, e.g. near ``max_model_len``: then each step's A is capped at its drafts).
A reply with none of them has no fingerprint (the comparison falls back to the aggregate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError
from workbench.engines.wiring import as_wirings
from workbench.model import capture
from workbench.model.draft import run_chains, top2_gap
from workbench.model.tree import draft_trees, tree_shape
from workbench.simulate.exact import exact_decode
from workbench.simulate.tree_verify import exact_tree_decode, tree_accepted_counts
from workbench.stats.counts import accepted_counts

FIELDS = ("verify_ct", "accepted_drafts", "histogram", "per_step_accepted", "per_step_drafted")
COUNTING = ("v2", "v1")


# ─────────────────────────────── the server's own counting ───────────────────────────────

@dataclass
class ServerSteps:
    """One request's verify steps as a server made them: raw A per step and the tokens it returned.

    ``last_max``: at temperature > 0 the last verify step may look past the returned output (tokens
    the server sampled and cut), so the output only bounds its raw A: ``accepts[-1] <= A <= last_max``.
    None: every A is known (greedy: the target's own continuation fills in what was cut).

        >>> st = server_steps([2, 1], n_output=5, last_max=3)      # the last step kept 1 token, all of them drafts
        >>> st.counted("v1"), st.possible("v2")
        ([2, 1], [[2, 1], [2, 2], [2, 3]])
    """

    accepts: list[int]
    n_output: int
    fragile: list[bool] = field(default_factory=list)    # per step: it compared at a near-tie position
    last_max: int | None = None
    row: list[int] | None = None          # A at every t of the request's row (-1: no counted chain there)
    gaps: list | None = None              # per position p: (relative top-2 gap, offline argmax != server token)
    start: int = 0                        # t of the first verify step (n_prompt - 1)
    depth: int = 0                        # draft steps S
    draft_gaps: list | None = None        # per t and depth 1..S: the draft's near-tie gap there. Chains: the relative
                                          # top-2 gap of its proposal; trees: the smallest gap of any drafting decision
                                          # that can change the tree's nodes at that depth (``tree.draft_trees(gaps=
                                          # True)``). None: not computed (temperature > 0, older results)

    def tie_at(self, t: int, d: int, eps: float) -> bool:
        """Can a near-tie at relative resolution ``eps`` change the comparison at depth ``d`` of the step at ``t``?

        - The draft's proposal there is within ``eps`` of its runner-up (:attr:`draft_gaps`): a server computing at
          that precision may propose the other token. This is where a served precision moves A. For a tree: some
          decision that builds its nodes at depth <= d (a top-k cut, a re-rank, the selection of N-1 nodes) is
          within ``eps``, so the server may verify another tree there (``workbench.model.tree``'s docstring).
        - The target's near-tie at position p = t + d counts only past the server's output (p >= start +
          n_output: the continuation the last step looks into is the float32 argmax here). Inside the output the
          comparison is against the server's own tokens, so the target's near-ties cannot move A there.
        - Without draft gaps (not computed): the target's near-ties anywhere, the older rule.
        """
        if self.draft_gaps is not None:
            if 0 <= t < len(self.draft_gaps) and 0 < d <= len(self.draft_gaps[t]) and self.draft_gaps[t][d - 1] <= eps:
                return True
            past = t + d >= self.start + self.n_output
        else:
            past = True
        if not past or not self.gaps or not 0 <= t + d < len(self.gaps):
            return False
        g, flip = self.gaps[t + d]
        return g <= eps or (flip and self.draft_gaps is None)

    def ties(self, eps: float) -> set:
        """Positions p = t + d of the request's row where :meth:`tie_at` holds for some step t and depth d
        (the walk's steps only need :meth:`tie_at`; this is the set a reader counts)."""
        n = len(self.gaps or self.row or [])
        return {t + d for t in range(n) for d in range(1, self.depth + 1) if self.tie_at(t, d, eps)}

    def counted(self, counting: str, accepts=None) -> list[int]:
        """A per step as the histogram counts it: raw (v2) or cut at the finish (v1)."""
        if counting not in COUNTING:
            raise WorkbenchError(f"counting {counting!r}: expected one of {', '.join(COUNTING)}")
        out, emitted = [], 1
        for a in self.accepts if accepts is None else accepts:
            out.append(a if counting == "v2" else max(0, min(a, self.n_output - emitted)))   # drafts kept
            emitted += a + 1
        return out

    def possible(self, counting: str) -> list[list[int]]:
        """Every counted A list the server may have made (one unless the last step is open and counted raw)."""
        if self.last_max is None or not self.accepts:
            return [self.counted(counting)]
        out = []
        for a in range(self.accepts[-1], self.last_max + 1):
            c = self.counted(counting, self.accepts[:-1] + [a])
            if c not in out:
                out.append(c)
        return out

    def resolved(self, live_fields: dict, counting: str) -> "ServerSteps":
        """A copy with the open last step fixed to the smallest raw A the live fields agree with (else
        its lower bound): what the offline totals use."""
        if self.last_max is None or not self.accepts:
            return self
        for a in range(self.accepts[-1], self.last_max + 1):
            cand = ServerSteps(self.accepts[:-1] + [a], self.n_output, list(self.fragile))
            if live_fields and _same(live_fields, reported(live_fields, cand, counting)):
                return cand
        return ServerSteps(list(self.accepts), self.n_output, list(self.fragile))


def server_steps(accepts, n_output: int, fragile=None, last_max: int | None = None) -> ServerSteps:
    """:class:`ServerSteps` from A per verify step (list) and the number of tokens returned."""
    return ServerSteps([int(a) for a in accepts], int(n_output), list(fragile or [False] * len(accepts)),
                       None if last_max is None else int(last_max))


def walk(A_row, n_prompt: int, n_output: int, steps: int) -> list[tuple[int, int]]:
    """The server's verify steps on a row: [(t, A(t))] from t = n_prompt - 1 until ``n_output`` tokens.

        >>> walk([-1, 2, 0, 0, 1, 0, 0, 0], n_prompt=2, n_output=5, steps=2)
        [(1, 2), (4, 1)]
    """
    A_row = [int(a) for a in (A_row.tolist() if hasattr(A_row, "tolist") else A_row)]
    out, t, emitted = [], int(n_prompt) - 1, 1
    while emitted < n_output:
        if not 0 <= t < len(A_row) or A_row[t] < 0:
            raise WorkbenchError(f"fingerprint walk: no counted verify step at t={t} (row of {len(A_row)}, "
                                 f"prompt {n_prompt}, output {n_output}, steps {steps}): the row is too short")
        out.append((t, A_row[t]))
        emitted += A_row[t] + 1
        t += A_row[t] + 1
    return out


def fields_of(meta) -> dict:
    """The fingerprint fields a reply carries (a :class:`~workbench.sglang_live.SpecMeta`)."""
    out = {}
    if meta.verify_ct is not None:
        out["verify_ct"] = int(meta.verify_ct)
    if meta.accepted_drafts is not None:
        out["accepted_drafts"] = int(meta.accepted_drafts)
    if meta.histogram is not None:
        out["histogram"] = _trim(meta.histogram)
    per = getattr(meta, "per_step_accepted", None)
    if per is not None:
        out["per_step_accepted"] = [int(a) for a in per]
        drafted = getattr(meta, "per_step_drafted", None) or []
        if len(set(drafted)) > 1:
            out["per_step_drafted"] = [int(d) for d in drafted]
    return out


def _trim(h) -> list[int]:
    h = [int(x) for x in h]
    while h and h[-1] == 0:
        h.pop()
    return h


def reported(live_fields: dict, steps: ServerSteps, counting: str, counted: list[int] | None = None) -> dict:
    """What a server that made ``steps`` reports in the fields ``live_fields`` has (same keys); an open
    last step (:attr:`ServerSteps.last_max`) at its lower bound unless ``counted`` gives the A list."""
    a = steps.counted(counting) if counted is None else counted
    drafted = live_fields.get("per_step_drafted")
    if drafted is not None and len(drafted) == len(a):        # steps that drafted fewer: A capped at the drafts
        a = [min(x, int(d)) for x, d in zip(a, drafted)]
    full = {"verify_ct": len(a), "accepted_drafts": int(sum(a)),
            "histogram": _trim([a.count(k) for k in range(max(a) + 1)] if a else []),
            "per_step_accepted": list(a), "per_step_drafted": drafted}
    return {k: full[k] for k in FIELDS if k in live_fields}


def _same(live_fields: dict, rep: dict) -> bool:
    return rep == {k: (_trim(v) if k == "histogram" else v) for k, v in live_fields.items()}


def status(live_fields: dict, steps: ServerSteps, counting: str, eps: float | None = None) -> str:
    """"identical", "tie" (differs, and near-ties explain the difference) or "differs"; "n/a" without
    fields. An open last step (temperature > 0) is identical when any raw A it may have had reproduces
    the fields. With ``eps`` (the served dtype's relative resolution) and the row's A and gaps, a near-tie
    excuses a difference only where it can make one (:func:`explained`); without them, any step that
    compared at a near-tie does (the older, looser rule)."""
    if not live_fields:
        return "n/a"
    if any(_same(live_fields, reported(live_fields, steps, counting, c)) for c in steps.possible(counting)):
        return "identical"
    if eps is not None and steps.row is not None and steps.gaps is not None:
        return "tie" if explained(live_fields, steps, counting, eps) else "differs"
    return "tie" if any(steps.fragile) else "differs"


MAX_FLIPS = 2         # near-tie flips tried per request when the server reports no per-step A (search bound)


def explained(live_fields: dict, steps: ServerSteps, counting: str, eps: float) -> bool:
    """Can near-ties at relative resolution ``eps`` turn this wiring's decode into what the server reported?

    A near-tie at position p (depth d = p - t of the step at t) can change that step's A only there: cut it
    to d - 1 (d <= A), or, at the first rejected depth (d = A + 1), let it run on to any A' in A+1..S. The
    steps after a changed one follow the row's own A from the new position (both walk the server's tokens).
    With ``per_step_accepted`` every step where the server and the wiring differ must be such a change (the
    first depth where they part is a near-tie); without it, up to :data:`MAX_FLIPS` changes are tried and the
    fields of the result must equal the server's (its step count, accepted drafts, histogram). A difference
    at a position that is not a near-tie is never excused by near-ties elsewhere in the request."""
    row, S, n = steps.row, steps.depth, steps.n_output

    def at(t):
        return row[t] if 0 <= t < len(row) and row[t] >= 0 else None

    def fits(accepts):
        return _same(live_fields, reported(live_fields, ServerSteps(accepts, n), counting))

    live = live_fields.get("per_step_accepted")
    if live is not None:
        drafted = live_fields.get("per_step_drafted") or [S] * len(live)
        t, out = steps.start, []
        for i, la in enumerate(live):
            a = at(t)
            if a is None:
                return False
            cap = min(a, int(drafted[i]) if i < len(drafted) else S)
            if cap != la:
                if min(cap, la) + 1 > S or not steps.tie_at(t, min(cap, la) + 1, eps):
                    return False
                a = la
            out.append(a)
            t += a + 1
        return sum(a + 1 for a in out[:-1]) + 1 < n <= sum(a + 1 for a in out) + 1 and fits(out)

    limit = live_fields.get("verify_ct")

    def search(t, emitted, accepts, flips):
        if emitted >= n:
            return fits(accepts)
        a = at(t)
        if a is None or (limit is not None and len(accepts) >= limit):
            return False
        options = [(a, flips)]
        if flips < MAX_FLIPS:
            for d in (d for d in range(1, min(a + 1, S) + 1) if steps.tie_at(t, d, eps)):
                options += [(d - 1, flips + 1)] if d <= a else [(x, flips + 1) for x in range(a + 1, S + 1)]
        return any(search(t + x + 1, emitted + x + 1, accepts + [x], f) for x, f in options)

    return search(steps.start, 1, [], 0)


# ─────────────────────────────── statistics of the verdict ───────────────────────────────

def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test: P(a split at least this uneven | each side 1/2)."""
    n = int(wins) + int(losses)
    if n == 0:
        return 1.0
    k = max(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def more_to_separate(wins: int, losses: int, n_requests: int, alpha: float = 0.05, cap: int = 100_000) -> int | None:
    """How many more requests would separate two wirings if the requests seen so far are typical
    (same share telling them apart, same split); None when they never would (no request told them
    apart yet, or an even split).

        >>> more_to_separate(3, 0, 16)      # 3 of 16 tell them apart, all one way: 6 such requests are needed
        14
    """
    n_inf = wins + losses
    if n_inf == 0 or wins == losses or n_requests < 1:
        return None
    rate, share = n_inf / n_requests, max(wins, losses) / n_inf
    for extra in range(1, cap + 1):
        m = int(round((n_requests + extra) * rate))
        w = int(round(m * share))
        if m > n_inf and sign_test(w, m - w) < alpha:
            return extra
    return None


# ─────────────────────────────── the offline side ───────────────────────────────

def relative_gaps(logits, tokens) -> list:
    """Per position p (0-based, predicting token p+1): (top-2 logit gap / max(|top logit|, 1), whether the
    offline argmax is not ``tokens[p+1]``), the raw material of near-ties at any resolution.

        >>> import torch
        >>> [(round(g, 3), f) for g, f in relative_gaps(torch.tensor([[5.0, 5.01], [9.0, 1.0]]), [0, 1, 0])]
        [(0.002, False), (0.889, False)]
    """
    import torch

    gap = top2_gap(logits)[:, 0].cpu()
    nxt = torch.as_tensor(list(tokens)[1:], dtype=torch.long)
    n = min(len(nxt), logits.shape[0])
    flip = torch.zeros(logits.shape[0], dtype=torch.bool)
    flip[:n] = logits[:n].argmax(-1).cpu() != nxt[:n]
    return list(zip(gap.tolist(), flip.tolist()))


def near_ties(logits, tokens, dtype_name: str = "bfloat16"):
    """Positions p (0-based, predicting token p+1) where the target's top two logits lie within one
    step of the served dtype at that magnitude, or where the offline argmax is not the server's token.

        >>> import torch
        >>> sorted(near_ties(torch.tensor([[5.0, 5.01, 0.0], [9.0, 1.0, 0.0], [0.0, 0.0, 3.0]]), [0, 1, 0, 2]))
        [0]
    """
    import torch

    eps = _eps(dtype_name)
    top = logits.float().topk(2, dim=-1).values
    gap = top[:, 0] - top[:, 1]
    tie = gap <= eps * top[:, 0].abs().clamp_min(1.0)
    nxt = torch.as_tensor(list(tokens)[1:], dtype=torch.long)
    n = min(len(nxt), logits.shape[0])
    flip = torch.zeros_like(tie)
    flip[:n] = logits[:n].argmax(-1).cpu() != nxt[:n]
    return {int(p) for p in torch.nonzero(tie.cpu() | flip.cpu()).flatten().tolist()}


def greedy_mismatches(target, requests, served_dtype: str = "bfloat16") -> list[dict]:
    """Is each server output the target's greedy output? One teacher-forced target pass per request
    (prompt + output): per request ``{"tokens", "flips", "mismatch"}``: output tokens, those that are not
    the target's argmax after the server's own prefix, and those of them that are not near-ties at
    ``served_dtype`` (:func:`near_ties`); ``ties``/``tie_flips``: output positions that are near-ties at
    bfloat16's resolution, and flips among them (the served precision's evidence, :mod:`workbench.live.precision`).
    ``requests``: list of (prompt_ids, output_ids)."""
    import torch

    out = []
    for prompt, output in requests:
        ids = [int(x) for x in prompt] + [int(x) for x in output]
        with torch.no_grad():
            logits = target.model(input_ids=torch.tensor([ids], device=target.device), use_cache=False).logits[0]
        logits = logits.float().cpu()[len(prompt) - 1:len(ids) - 1]
        got = torch.as_tensor([int(x) for x in output], dtype=torch.long)
        flip = logits.argmax(-1) != got
        top = logits.topk(2, dim=-1).values
        tie = (top[:, 0] - top[:, 1]) <= _eps(served_dtype) * top[:, 0].abs().clamp_min(1.0)
        soft = (top[:, 0] - top[:, 1]) <= _eps("bfloat16") * top[:, 0].abs().clamp_min(1.0)
        out.append({"tokens": len(output), "flips": int(flip.sum()), "mismatch": int((flip & ~tie).sum()),
                    "ties": int(soft.sum()), "tie_flips": int((flip & soft).sum())})
    return out


def _eps(dtype_name: str) -> float:
    import torch

    try:
        return torch.finfo(getattr(torch, str(dtype_name).replace("torch.", ""))).eps
    except (AttributeError, TypeError):
        raise WorkbenchError(f"served dtype {dtype_name!r}: expected a torch float dtype such as bfloat16") from None


def continuation(target, ids: list[int], n: int):
    """(the target's greedy next ``n`` tokens after ``ids``, logits of the first pass [len(ids), V])."""
    import torch

    seq = list(ids)
    first = None
    with torch.no_grad():
        for _ in range(n):
            logits = target.model(input_ids=torch.tensor([seq], device=target.device), use_cache=False).logits[0]
            if first is None:
                first = logits.float().cpu()
            seq.append(int(logits[-1].argmax()))
    return seq[len(ids):], first


def offline_requests(target, draft, requests, wirings, *, steps: int, topk: int = 1, num_draft_tokens=None,
                     served_dtype: str | None = "bfloat16", batch_size: int = 8, rope_shift: int | None = None,
                     sampled: bool = False, progress: bool = False) -> dict:
    """{spec: [ServerSteps per request]}: each request's decode as a server on that wiring makes it.

    ``requests``: list of (prompt_ids, output_ids) (the server's own output). Chain when ``topk`` is 1,
    SGLang's tree otherwise (``steps``, ``topk``, ``num_draft_tokens``). ``rope_shift``: the tree's rotary
    offset (default the draft's ``rotary_offset``, as chains use it; 1 = servers before SGLang PR #25015).

    ``sampled``: the server sampled (temperature > 0, SGLang's lossless target-only verification).
    A is still the longest prefix of the server's own continuation that is a path in the (same,
    deterministic) tree, so steps are matched against the returned tokens exactly as at T = 0; only
    what lies past the output is unknown: no greedy continuation is run, the last step's A is bounded
    by the output (``ServerSteps.last_max``), and no near-ties are marked (the target's logits do not
    decide A, the server's sampled tokens do).

    Each :class:`ServerSteps` also keeps its row's A at every t, the target's relative top-2 gaps
    (:func:`relative_gaps`) and, greedy, the draft's: for chains each proposal's relative top-2 gap
    (``draft.run_chains(gaps=True)``), for trees per depth the smallest gap of the decisions that build the tree
    there (``tree.draft_trees(gaps=True)``), so near-ties can be judged later at any resolution (:func:`status` with
    ``eps``; :meth:`ServerSteps.tie_at` says which can move A: the draft's, and the target's past the output);
    ``fragile`` marks the steps that compared at a near-tie at ``served_dtype`` (None: bfloat16, the lenient one).
    """
    import torch


    shape = tree_shape(steps, topk, num_draft_tokens)
    S = shape.steps
    rope_shift = int(getattr(draft, "rotary_offset", 0) if rope_shift is None else rope_shift)
    wl = as_wirings(wirings, target.n_layers)
    for w in wl:
        capture.check_width(w.taps, target, draft.fc_width, where="the draft's fc")
    rows, gaps, ends = [], [], {}
    for i, (prompt, output) in enumerate(requests):
        ids = [int(x) for x in prompt] + [int(x) for x in output]
        if sampled:                   # filler only: positions past the output are never matched (next token -1)
            cont = [ids[-1]] * (S + 1)
            ends[i] = len(ids)
            gaps.append(None)
        else:
            cont, logits = continuation(target, ids, S + 1)
            gaps.append(relative_gaps(logits, ids))
        full = ids + cont
        rows.append({"input_ids": full, "loss_mask": [0] * len(prompt) + [1] * (len(full) - len(prompt)),
                     "n_prompt_tokens": len(prompt), "n_response_tokens": len(full) - len(prompt), "_row": i})
    eps = _eps(served_dtype or "bfloat16")                    # the resolution ``fragile`` marks steps at
    A_rows: dict = {w.spec: {} for w in wl}
    draft_gaps: dict = {w.spec: {} for w in wl}             # greedy: the draft's near-tie gaps (chains and trees)
    ddev, ddtype = draft.device, draft.dtype
    for batch in capture.extract(target, rows, [w.spec for w in wl], batch_size=batch_size, progress=progress):
        ids, att = batch.input_ids.to(ddev), batch.attention_mask.to(ddev)
        nt = torch.cat([batch.input_ids[:, 1:], batch.input_ids[:, :1] * 0 - 1], 1)     # the row's own next tokens
        for b, L in enumerate(batch.lengths.tolist()):
            nt[b, L - 1] = batch.next_token[b, L - 1]
            if sampled:
                nt[b, ends[int(batch.rows[b])] - 1:] = -1          # g_{p+1} past the server's output: unknown
        nt = nt.to(ddev)
        lm, ln = batch.loss_mask.to(ddev), batch.lengths.to(ddev)
        for w in wl:
            feats = batch.concat(w.taps).to(device=ddev, dtype=ddtype)
            with torch.no_grad():
                if shape.topk == 1:
                    chains = run_chains(draft, feats, ids, att, S, gaps=not sampled)
                    A = accepted_counts(chains.tokens, nt, lm, ln, S)
                    if chains.gaps is not None:
                        for b, r in enumerate(batch.rows):
                            draft_gaps[w.spec][int(r)] = chains.gaps[b].cpu().tolist()
                else:
                    trees = draft_trees(draft, feats, ids, att, S, shape.topk, shape.num_draft_tokens,
                                        rope_shift=rope_shift, gaps=not sampled)
                    A = tree_accepted_counts(trees, nt, lm, ln)
                    if trees.gaps is not None:
                        for b, r in enumerate(batch.rows):
                            draft_gaps[w.spec][int(r)] = trees.gaps[b].cpu().tolist()
            for b, r in enumerate(batch.rows):
                A_rows[w.spec][int(r)] = A[b].cpu()
    out = {}
    for w in wl:
        per = []
        for i, (prompt, output) in enumerate(requests):
            path = walk(A_rows[w.spec][i], len(prompt), len(output), S)
            accepts = [a for _, a in path]
            open_last = None
            if sampled and accepts:       # the last step matched every output token left to it: it may go on
                left = len(output) - 1 - sum(a + 1 for a in accepts[:-1])
                open_last = S if accepts[-1] == left < S else None
            st = server_steps(accepts, len(output), None, open_last)
            st.row, st.gaps = [int(a) for a in A_rows[w.spec][i].tolist()], gaps[i]
            st.start, st.depth, st.draft_gaps = len(prompt) - 1, S, draft_gaps[w.spec].get(i)
            st.fragile = [any(st.tie_at(t, d, eps) for d in range(1, min(a + 1, S) + 1)) for t, a in path]
            per.append(st)
        out[w.spec] = per
    return out


def exact_requests(target, draft, prompts, wiring, *, steps: int, topk: int = 1, num_draft_tokens=None,
                   max_new_tokens) -> list[tuple[list[int], ServerSteps]]:
    """The exact reference: the real decode loop on each prompt; [(output ids, ServerSteps)]."""

    out = []
    for prompt, n in zip(prompts, max_new_tokens):
        if int(topk) == 1:
            gen, acc = exact_decode(target, draft, prompt, wiring, steps, n)
        else:
            gen, acc = exact_tree_decode(target, draft, prompt, wiring, steps, topk, num_draft_tokens, n)
        out.append((gen, server_steps(acc, len(gen))))
    return out
