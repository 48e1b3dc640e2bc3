"""The EAGLE-3 draft model: its modules and draft chains for every start position (checkpoint files: ``checkpoint``).

    >>> import torch
    >>> from workbench.model.draft import Eagle3Draft, new_draft_config, run_chains, chain_reference
    >>> _ = torch.manual_seed(0)
    >>> cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4,
    ...                         "intermediate_size": 64}, layer_ids=[1, 3, 4])
    >>> draft = Eagle3Draft.from_config(cfg, torch.randn(50, 32))
    >>> feats, ids = torch.randn(1, 6, 96), torch.randint(0, 50, (1, 6))
    >>> out = run_chains(draft, feats, ids, torch.ones(1, 6, dtype=torch.long), K=3)
    >>> out.tokens.shape                     # [B, T, K] drafted tokens, target ids
    torch.Size([1, 6, 3])
    >>> bool((out.tokens[0, 2] == chain_reference(draft, feats[0], ids[0], 2, 3)).all())
    True

The computation is the one of SGLang ``python/sglang/srt/models/llama_eagle3.py`` / SpecForge
``specforge/modeling/draft/llama3_eagle.py``. One draft step at position p:

    h = fc(concat(taps))            # first step only (norm_before_fc: RMSNorm of the concat; fc_norm: per tap)
    x = concat(input_layernorm(embed(token_{p+1})), hidden_norm(h))     # embeds FIRST, width 2H
    h = h + o_proj(attn(q/k/v(x)))  # rotary position p + k at step k (+ rotary_offset for k >= 1)
    h = h + mlp(post_attention_layernorm(h))
    logits = lm_head(norm(h))       # draft vocab; target id = draft id + d2t[draft id]
    next step's hidden = h          # pre-norm (norm(h) when config norm_output is on)

The residual is ``h`` (``hidden_norm(h)`` with norm_before_residual). ``Eagle3Draft.set_variant``
switches these options and the rotary offset to what one engine computes (``workbench/engines.py``).

Reading and writing checkpoint folders lives in :mod:`workbench.model.checkpoint`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from workbench.core.errors import WorkbenchError
from workbench.core.render import Rendered
from workbench.engines.families import MASK_TOKEN_KEYS, mask_token
from workbench.engines.positions import yarn_attention_factor
from workbench.model.attention import prefix_attention
from workbench.model.chunks import head_chunks
from workbench.model.rotary import inv_freq, read_rope, rotate

ARCHITECTURE = "LlamaForCausalLMEagle3"
_ACTS = {"silu": F.silu, "swish": F.silu, "gelu": F.gelu, "relu": F.relu,
         "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
         "gelu_new": lambda x: F.gelu(x, approximate="tanh")}


# ----------------------------------------------------------------------------------------- config

@dataclass(frozen=True)
class _Spec:
    """The numbers the forward needs, read (and checked) from a config.json dict."""

    vocab_size: int
    draft_vocab_size: int
    hidden_size: int
    target_hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    hidden_act: str
    rope_theta: float
    rope_scaling: dict | None
    fc_bias: bool
    attention_bias: bool
    mlp_bias: bool
    fc_norm: bool
    norm_before_fc: bool
    norm_output: bool
    norm_before_residual: bool
    layer_ids: tuple | None
    has_draft_vocab_key: bool
    mask_token_id: int | None = None      # P-EAGLE's token for the masked slots (vLLM's read order)


def _cfg_int(cfg: dict, key: str, where: str, default=None) -> int:
    v = cfg.get(key, default)
    if v is None:
        raise WorkbenchError(f"{where}: missing key {key!r} (expected a positive integer)")
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise WorkbenchError(f"{where}: key {key!r} is {v!r} (expected a positive integer)")
    return v


def _spec(cfg: dict, where: str = "config.json") -> _Spec:
    """Check a (Llama-format) EAGLE-3 draft config and return the numbers the forward needs."""
    if not isinstance(cfg, dict):
        raise WorkbenchError(f"{where}: expected a JSON object, got {type(cfg).__name__}")
    layers = cfg.get("num_hidden_layers", 1)
    if layers != 1:
        raise WorkbenchError(
            f"{where}: num_hidden_layers is {layers!r}; workbench runs single-layer EAGLE-3 drafts only "
            "(extra decoder layers are not modelled), refusing rather than running a different model")
    if cfg.get("tie_word_embeddings"):
        raise WorkbenchError(f"{where}: tie_word_embeddings is true (lm_head = the embedding); "
                             "not supported, set it to false with a real lm_head.weight")
    vocab = _cfg_int(cfg, "vocab_size", where)
    has_dv = cfg.get("draft_vocab_size") is not None
    dvocab = _cfg_int(cfg, "draft_vocab_size", where) if has_dv else vocab
    if dvocab > vocab:
        raise WorkbenchError(f"{where}: draft_vocab_size {dvocab} is larger than vocab_size {vocab}")
    hidden = _cfg_int(cfg, "hidden_size", where)
    heads = _cfg_int(cfg, "num_attention_heads", where)
    kv = _cfg_int(cfg, "num_key_value_heads", where, default=heads)
    if heads % kv:
        raise WorkbenchError(f"{where}: num_attention_heads {heads} is not a multiple of "
                             f"num_key_value_heads {kv}")
    if cfg.get("head_dim") is None and hidden % heads:
        raise WorkbenchError(f"{where}: hidden_size {hidden} is not divisible by num_attention_heads {heads} "
                             "(give head_dim)")
    head_dim = _cfg_int(cfg, "head_dim", where, default=hidden // heads)
    if head_dim % 2:
        raise WorkbenchError(f"{where}: head_dim {head_dim} must be even (rotary embedding)")
    act = cfg.get("hidden_act", "silu")
    if act not in _ACTS:
        raise WorkbenchError(f"{where}: hidden_act {act!r} is not supported (expected one of {', '.join(_ACTS)})")
    theta, scaling = read_rope(cfg, where)
    eagle = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids", cfg.get("eagle_aux_hidden_state_layer_ids"))
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise WorkbenchError(f"{where}: eagle_aux_hidden_state_layer_ids is {ids!r} (expected a list of ints)")
        ids = tuple(ids)
    return _Spec(
        vocab_size=vocab, draft_vocab_size=dvocab, hidden_size=hidden,
        target_hidden_size=_cfg_int(cfg, "target_hidden_size", where, default=hidden),
        num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
        intermediate_size=_cfg_int(cfg, "intermediate_size", where),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), hidden_act=act, rope_theta=theta,
        rope_scaling=scaling, fc_bias=bool(cfg.get("bias", False)),
        attention_bias=bool(cfg.get("attention_bias", False)), mlp_bias=bool(cfg.get("mlp_bias", False)),
        # fc_norm alias use_aux_norm (SGLang llama_eagle3.py); norm_before_fc nested first (vLLM llama_eagle3.py)
        fc_norm=bool(cfg.get("fc_norm") or cfg.get("use_aux_norm") or False),
        norm_before_fc=bool(eagle.get("norm_before_fc", cfg.get("norm_before_fc", False))),
        norm_output=bool(cfg.get("norm_output", False)),
        norm_before_residual=bool(cfg.get("norm_before_residual", False)), layer_ids=ids,
        has_draft_vocab_key=has_dv, mask_token_id=_mask_token_or_none(cfg, where, vocab))


def _mask_token_or_none(cfg: dict, where: str, vocab: int) -> int | None:
    """The mask token, or None when it is absent or unusable: only a draft with ``mask_hidden`` (P-EAGLE) needs it,
    and the loader checks it there (:func:`mask_token`)."""
    try:
        return mask_token(cfg, where, vocab)[0]
    except WorkbenchError:
        return None


def _as_dict(config) -> dict:
    if isinstance(config, dict):
        return dict(config)
    if hasattr(config, "to_dict"):
        return config.to_dict()
    raise WorkbenchError(f"expected a config dict or a transformers config, got {type(config).__name__}")


def new_draft_config(target_config, *, hidden_size: int | None = None, draft_vocab_size: int | None = None,
                     layer_ids: list[int] | None = None, intermediate_size: int | None = None,
                     num_attention_heads: int | None = None, num_key_value_heads: int | None = None) -> dict:
    """A fresh EAGLE-3 draft ``config.json`` (SpecForge/SGLang format) for a target.

        >>> cfg = new_draft_config({"vocab_size": 100, "hidden_size": 64, "num_attention_heads": 4,
        ...                         "intermediate_size": 128}, layer_ids=[1, 3, 4], draft_vocab_size=40)
        >>> cfg["architectures"], cfg["draft_vocab_size"], cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        (['LlamaForCausalLMEagle3'], 40, [1, 3, 4])
    """
    t = _as_dict(target_config)
    where = "target config"
    vocab = _cfg_int(t, "vocab_size", where)
    t_hidden = _cfg_int(t, "hidden_size", where)
    hidden = hidden_size or t_hidden
    heads = num_attention_heads or _cfg_int(t, "num_attention_heads", where)
    if num_key_value_heads:
        kv = num_key_value_heads
    elif num_attention_heads:
        kv = heads
    else:
        kv = t.get("num_key_value_heads") or heads
    theta, scaling = read_rope(t, where)
    cfg = {
        "architectures": [ARCHITECTURE], "model_type": "llama", "num_hidden_layers": 1,
        "vocab_size": vocab, "draft_vocab_size": draft_vocab_size or vocab, "hidden_size": hidden,
        "num_attention_heads": heads, "num_key_value_heads": kv,
        "intermediate_size": intermediate_size or (t.get("intermediate_size") if hidden == t_hidden else None)
        or 4 * hidden,
        "hidden_act": t.get("hidden_act", "silu"), "rms_norm_eps": float(t.get("rms_norm_eps", 1e-6)),
        "rope_theta": theta, "rope_scaling": scaling,
        "max_position_embeddings": int(t.get("max_position_embeddings", 2048)),
        "tie_word_embeddings": False, "bias": False, "torch_dtype": "float32",
    }
    if hidden == t_hidden and t.get("head_dim") and not num_attention_heads:
        cfg["head_dim"] = t["head_dim"]
    if hidden != t_hidden:
        cfg["target_hidden_size"] = t_hidden
    if layer_ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [int(i) for i in layer_ids],
                               "use_aux_hidden_state": True}
    _spec(cfg, "new draft config")   # fail here, not at first use
    return cfg


# ----------------------------------------------------------------------------------------- modules

class _RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


class _Attention(nn.Module):
    def __init__(self, s: _Spec):
        super().__init__()
        self.q_proj = nn.Linear(2 * s.hidden_size, s.num_heads * s.head_dim, bias=s.attention_bias)
        self.k_proj = nn.Linear(2 * s.hidden_size, s.num_kv_heads * s.head_dim, bias=s.attention_bias)
        self.v_proj = nn.Linear(2 * s.hidden_size, s.num_kv_heads * s.head_dim, bias=s.attention_bias)
        self.o_proj = nn.Linear(s.num_heads * s.head_dim, s.hidden_size, bias=s.attention_bias)


class _MLP(nn.Module):
    def __init__(self, s: _Spec):
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=s.mlp_bias)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=s.mlp_bias)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=s.mlp_bias)
        self.act = _ACTS[s.hidden_act]

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, s: _Spec):
        super().__init__()
        self.hidden_norm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.input_layernorm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.post_attention_layernorm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = _Attention(s)
        self.mlp = _MLP(s)


class Eagle3Draft(nn.Module):
    """An EAGLE-3 draft (one decoder layer on [embed; hidden], fc over three target taps).

        >>> import torch
        >>> cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4,
        ...                         "intermediate_size": 64})
        >>> d = Eagle3Draft.from_config(cfg, torch.zeros(50, 32))
        >>> d.hidden_size, d.target_hidden_size, d.vocab_size, d.draft_vocab_size
        (32, 32, 50, 50)

    Parameter names are the checkpoint's (``fc.weight``, ``midlayer.self_attn.q_proj.weight``, ...);
    ``embed_tokens`` is the target's input embedding (frozen, never saved); ``d2t`` holds offsets
    (target id = draft id + d2t[draft id]); ``t2d`` marks the target ids the draft vocab covers.
    """

    def __init__(self, config: dict, *, where: str = "config.json"):
        super().__init__()
        self.config = dict(config)
        s = self.spec = _spec(self.config, where)
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(3 * s.target_hidden_size, s.hidden_size, bias=s.fc_bias)
        if s.norm_before_fc:      # one RMSNorm over the concatenated taps (vLLM/speculators ``input_norm``)
            self.input_norm = _RMSNorm(3 * s.target_hidden_size, s.rms_norm_eps)
        if s.fc_norm:             # one RMSNorm per tap (Eagle-3.1 ``fc_norm``)
            self.fc_norm = nn.ModuleList(_RMSNorm(s.target_hidden_size, s.rms_norm_eps) for _ in range(3))
        self.midlayer = _MidLayer(s)
        self.norm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.lm_head = nn.Linear(s.hidden_size, s.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(s.draft_vocab_size, dtype=torch.long))
        t2d = torch.zeros(s.vocab_size, dtype=torch.bool)
        t2d[: s.draft_vocab_size] = True
        self.register_buffer("t2d", t2d)
        # fp32, kept off the module so .to(bf16) cannot round it
        self._inv_freq = inv_freq(s.head_dim, s.rope_theta, s.rope_scaling)
        self._rope_scale = yarn_attention_factor(s.rope_scaling)
        self.has_embed = False            # True once the embedding came from a checkpoint or a target
        self.embed_source = "missing"
        self.source_format = "eagle3"
        self.path = None
        self.notes: list[str] = []        # non-fatal findings (shown by describe_draft / the CLI)
        self.raw_config = self.config     # the config.json as found on disk (load_draft sets it)
        # what the forward computes: the config's Eagle-3.1 options (set_variant switches them to what an
        # engine computes, see workbench/engines.py) and the extra rotary offset of decode steps k >= 1
        self.variant = {"norm_before_fc": s.norm_before_fc, "fc_norm": s.fc_norm, "norm_output": s.norm_output,
                        "norm_before_residual": s.norm_before_residual}
        self.rotary_offset = 0
        self.lm_head_source = "checkpoint"
        # P-EAGLE: "sequential" (a chain: step k feeds step k-1's token and hidden) or "parallel" (every step
        # k >= 1 feeds the mask token and fc(mask_hidden): all K tokens in one pass, vLLM parallel_drafting)
        self.drafting = "sequential"
        self.register_buffer("mask_hidden", None)   # [.., 3 x target hidden] once set_mask_hidden is called

    # attributes of the agreed API
    hidden_size = property(lambda self: self.spec.hidden_size)
    target_hidden_size = property(lambda self: self.spec.target_hidden_size)
    vocab_size = property(lambda self: self.spec.vocab_size)
    draft_vocab_size = property(lambda self: self.spec.draft_vocab_size)
    eagle_layer_ids = property(lambda self: list(self.spec.layer_ids) if self.spec.layer_ids is not None else None)

    @property
    def fc_width(self) -> int:
        """Features the ``fc`` reads: (number of taps) x target hidden size."""
        return int(self.fc.in_features)

    @property
    def emittable(self) -> torch.Tensor:
        """Bool [vocab_size]: the target ids the draft vocab can emit (all True without a reduced vocab)."""
        return self.t2d.bool()

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @classmethod
    def from_config(cls, config: dict, embed_weight: torch.Tensor) -> "Eagle3Draft":
        """Fresh (random-init) draft for training; ``embed_weight`` [V, H] is the target's embedding."""
        draft = cls(_as_dict(config), where="draft config")
        draft.set_embedding(embed_weight, source="target")
        return draft

    def set_embedding(self, weight: torch.Tensor, source: str = "target"):
        """Use ``weight`` [vocab_size, hidden_size] as the (frozen) input embedding."""
        want = (self.vocab_size, self.hidden_size)
        if tuple(weight.shape) != want:
            raise WorkbenchError(f"embedding from the {source} has shape {list(weight.shape)}, the draft expects "
                                 f"[vocab_size, hidden_size] = {list(want)}")
        with torch.no_grad():
            self.embed_tokens.weight.copy_(weight.detach().to(self.embed_tokens.weight))
        self.has_embed, self.embed_source = True, source

    def set_variant(self, *, rotary_offset: int | None = None, **options) -> "Eagle3Draft":
        """Compute as an engine does: switch Eagle-3.1 options (``norm_before_fc``, ``fc_norm``,
        ``norm_output``, ``norm_before_residual``) and the rotary offset of decode steps k >= 1.

            >>> import torch
            >>> cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4,
            ...                         "intermediate_size": 64})
            >>> d = Eagle3Draft.from_config(dict(cfg, norm_output=True), torch.zeros(50, 32))
            >>> d.set_variant(norm_output=False, rotary_offset=1).variant["norm_output"], d.rotary_offset
            (False, 1)

        Switching on a norm the checkpoint has no weights for is an error (the engine would crash or
        compute with ones): ``fc_norm`` needs ``fc_norm.{0,1,2}.weight``, ``norm_before_fc`` needs
        ``input_norm.weight``.
        """
        for name, value in options.items():
            if name not in self.variant:
                raise WorkbenchError(f"unknown draft option {name!r} (expected one of {', '.join(self.variant)})")
            need = {"fc_norm": "fc_norm", "norm_before_fc": "input_norm"}.get(name)
            if value and need and not hasattr(self, need):
                raise WorkbenchError(f"cannot switch on {name}: the draft has no {need} weights "
                                     f"(its config.json does not set {name})")
            self.variant[name] = bool(value)
        if rotary_offset is not None:
            if isinstance(rotary_offset, bool) or not isinstance(rotary_offset, int):
                raise WorkbenchError(f"rotary_offset must be an integer, got {rotary_offset!r}")
            self.rotary_offset = rotary_offset
        return self

    @property
    def own_drafting(self) -> str:
        """What the checkpoint was trained for: "parallel" with a ``mask_hidden`` and a mask token (P-EAGLE)."""
        return "parallel" if self.mask_hidden is not None and self.spec.mask_token_id is not None else "sequential"

    def set_mask_hidden(self, weight: torch.Tensor, *, where: str = "mask_hidden"):
        """Install P-EAGLE's learned ``mask_hidden`` (the pre-fc taps of every masked slot; any shape with
        3 x target hidden values, as vLLM's ``load_weights`` views it)."""
        want = 3 * self.target_hidden_size
        if weight.numel() != want:
            raise WorkbenchError(f"{where}: mask_hidden has shape {list(weight.shape)} ({weight.numel()} values), "
                                 f"expected 3 x target hidden = {want} values")
        self.mask_hidden = weight.detach().clone().to(self.fc.weight.device, self.fc.weight.dtype)
        return self

    def set_drafting(self, mode: str) -> "Eagle3Draft":
        """``"parallel"`` (P-EAGLE: steps k >= 1 feed the mask token and fc(mask_hidden), one pass) or
        ``"sequential"`` (a chain). Parallel needs ``mask_hidden`` and a mask token in the config.

            >>> import torch
            >>> cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4,
            ...                         "intermediate_size": 64})
            >>> d = Eagle3Draft.from_config(dict(cfg, mask_token_id=3), torch.zeros(50, 32))
            >>> d.set_mask_hidden(torch.zeros(96)).set_drafting("parallel").drafting
            'parallel'
        """
        if mode not in ("parallel", "sequential"):
            raise WorkbenchError(f"drafting {mode!r}: expected parallel or sequential")
        if mode == "parallel":
            where = f"{self.path}: " if self.path else ""
            if self.mask_hidden is None:
                raise WorkbenchError(f"{where}parallel drafting needs the draft's mask_hidden tensor (a P-EAGLE "
                                     "draft's); this draft's weights have none")
            if self.spec.mask_token_id is None:
                raise WorkbenchError(f"{where}parallel drafting needs a mask token in config.json (one of "
                                     + ", ".join(MASK_TOKEN_KEYS) + ")")
        self.drafting = mode
        return self

    def masked_slot(self, shape) -> tuple[torch.Tensor, torch.Tensor]:
        """(token ids, hidden) of P-EAGLE's masked slots for a [B, T] grid: the mask token and fc(mask_hidden)
        (through input_norm / fc_norm as the taps are: vLLM ``combine_hidden_states`` on mask_hidden)."""
        dev = self.fc.weight.device
        h = self.project(self.mask_hidden.reshape(-1).to(dev))
        return (torch.full(tuple(shape), self.spec.mask_token_id, dtype=torch.long, device=dev),
                h.expand(*tuple(shape), h.shape[-1]))

    def set_lm_head(self, weight: torch.Tensor, source: str = "target"):
        """Use ``weight`` [draft_vocab_size, hidden_size] as lm_head (SGLang takes the target's when
        the config has no ``draft_vocab_size``)."""
        want = tuple(self.lm_head.weight.shape)
        if tuple(weight.shape) != want:
            raise WorkbenchError(f"lm_head from the {source} has shape {list(weight.shape)}, the draft expects "
                                 f"[draft_vocab_size, hidden_size] = {list(want)}")
        with torch.no_grad():
            self.lm_head.weight.copy_(weight.detach().to(self.lm_head.weight))
        self.lm_head_source = source

    def set_vocab_map(self, d2t: torch.Tensor, t2d: torch.Tensor | None = None, *, where: str = "d2t"):
        """Install a reduced-vocab map: ``d2t`` offsets [draft_vocab_size], ``t2d`` bool [vocab_size]."""
        d2t = torch.as_tensor(d2t)
        if d2t.dim() != 1 or d2t.shape[0] != self.draft_vocab_size:
            raise WorkbenchError(f"{where}: d2t has shape {list(d2t.shape)}, expected [draft_vocab_size] = "
                                 f"[{self.draft_vocab_size}]")
        if d2t.is_floating_point() or d2t.dtype == torch.bool:
            raise WorkbenchError(f"{where}: d2t has dtype {d2t.dtype}, expected integer offsets (int64)")
        if self.draft_vocab_size > 1 and torch.equal(d2t.long().cpu(), torch.arange(self.draft_vocab_size)):
            raise WorkbenchError(f"{where}: d2t is arange({self.draft_vocab_size}): target ids written where offsets "
                                 "belong (target id = draft id + d2t[draft id]; an identity map is all zeros)")
        tid = torch.arange(self.draft_vocab_size) + d2t.long().cpu()
        bad = ((tid < 0) | (tid >= self.vocab_size)).nonzero().flatten()
        if len(bad):
            i = int(bad[0])
            raise WorkbenchError(f"{where}: d2t maps draft id {i} to target id {int(tid[i])}, outside the target "
                                 f"vocab [0, {self.vocab_size}) ({len(bad)} such ids; d2t must hold offsets)")
        if len(set(tid.tolist())) != len(tid):
            self.notes.append("d2t maps several draft ids to the same target id")
        derived = torch.zeros(self.vocab_size, dtype=torch.bool)
        derived[tid] = True
        if t2d is not None:
            t2d = torch.as_tensor(t2d)
            if tuple(t2d.shape) != (self.vocab_size,):
                raise WorkbenchError(f"{where}: t2d has shape {list(t2d.shape)}, expected [vocab_size] = "
                                     f"[{self.vocab_size}]")
            if not torch.equal(t2d.bool().cpu(), derived):
                self.notes.append(f"t2d disagrees with d2t on {int((t2d.bool().cpu() != derived).sum())} "
                                  "target ids; using the set d2t maps to (what the engines use)")
        self.d2t.copy_(d2t.long())
        self.t2d.copy_(derived)

    # ------------------------------------------------------------------ pieces of the forward
    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft vocab ids → target vocab ids (through the ``d2t`` offsets)."""
        return draft_ids + self.d2t[draft_ids]

    def target_to_draft(self, target_ids: torch.Tensor) -> torch.Tensor:
        """Target ids → draft ids, -1 where the draft vocab does not have the token."""
        dev = self.d2t.device
        idx = torch.full((self.vocab_size,), -1, dtype=torch.long, device=dev)
        idx[self.to_target(torch.arange(self.draft_vocab_size, device=dev))] = \
            torch.arange(self.draft_vocab_size, device=dev)
        return idx[target_ids]

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """``fc`` over the concatenated taps [..., 3·H_target] → [..., H].

        ``norm_before_fc``: one RMSNorm over the concatenation first (``input_norm``); ``fc_norm``: one
        RMSNorm per tap. Both on: input_norm, then fc_norm (the order of vLLM llama_eagle3.py
        ``combine_hidden_states``; speculators refuses both at once).
        """
        want = 3 * self.target_hidden_size
        if features.shape[-1] != want:
            raise WorkbenchError(f"draft features have width {features.shape[-1]} (shape {list(features.shape)}); "
                                 f"the draft's fc expects 3 taps x target hidden {self.target_hidden_size} = {want}")
        x = features.to(self.fc.weight.dtype)
        if self.variant["norm_before_fc"]:
            x = self.input_norm(x)
        if self.variant["fc_norm"]:
            x = torch.cat([n(c) for n, c in zip(self.fc_norm, x.chunk(3, dim=-1))], dim=-1)
        return self.fc(x)

    def qkv(self, h, emb, pos):
        """q [B,nh,T,d], k/v [B,nkv,T,d] (rotary at ``pos``) and the residual, for hidden ``h`` + token embeds."""
        m, s = self.midlayer, self.spec
        hn = m.hidden_norm(h)
        residual = hn if self.variant["norm_before_residual"] else h
        x = torch.cat((m.input_layernorm(emb.to(h.dtype)), hn), dim=-1)          # embeds FIRST
        B, T = x.shape[:2]
        q = m.self_attn.q_proj(x).view(B, T, s.num_heads, s.head_dim).transpose(1, 2)
        k = m.self_attn.k_proj(x).view(B, T, s.num_kv_heads, s.head_dim).transpose(1, 2)
        v = m.self_attn.v_proj(x).view(B, T, s.num_kv_heads, s.head_dim).transpose(1, 2)
        q, k = rotate(q, pos, self._inv_freq, self._rope_scale), rotate(k, pos, self._inv_freq, self._rope_scale)
        rep = s.num_heads // s.num_kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return q, k, v, residual

    def finish(self, residual, attn):
        """Attention output [B,nh,T,d] → the layer's pre-norm output [B,T,H]."""
        m = self.midlayer
        B, _, T, _ = attn.shape
        h = residual + m.self_attn.o_proj(attn.transpose(1, 2).reshape(B, T, -1))
        return h + m.mlp(m.post_attention_layernorm(h))

    def logits(self, h):
        """Draft-vocab logits of a layer output (``norm`` then ``lm_head``)."""
        return self.lm_head(self.norm(h))

    def next_hidden(self, h):
        """The hidden fed to the next step: pre-norm (post-norm when config ``norm_output``)."""
        return self.norm(h) if self.variant["norm_output"] else h

    def check_ready(self):
        if not self.has_embed:
            raise WorkbenchError("the draft has no embed_tokens (the checkpoint has none): load it with the "
                                 "target, load_draft(path, target), so the target's embedding is used")


# ----------------------------------------------------------------------------------------- chains

@dataclass
class ChainOutput:
    """Drafted chains for every start position. ``tokens[b, p, k]``: the (k+1)-th token of the chain
    with features h_0..h_p and bonus token x_{p+1}, in target ids (predicts position p+2+k)."""

    tokens: torch.Tensor                          # LongTensor [B, T, K]
    topk_ids: torch.Tensor | None = None          # [B, T, K, k] target ids
    topk_logprobs: torch.Tensor | None = None     # [B, T, K, k] log-probs over the draft vocab
    logits: torch.Tensor | None = None            # [B, T, K, draft_vocab] fp32, only if asked
    gaps: torch.Tensor | None = None              # [B, T, K] relative top-2 logit gap of each proposal, if asked


def unroll(draft: Eagle3Draft, features, input_ids, attention_mask, K: int, teacher=None, *, head=None,
           max_memory=None):
    """The training-time-test layout, yielding step-k logits [B, T, Vd] for k = 0..K-1 (with ``head``,
    a :class:`workbench.chunks.HeadOutput` per step instead: ids, top-k, ... without [B, T, Vd]).

    Step k at position p: rotary position p+k; attends to step-0 keys at positions <= p plus its own
    keys from steps 1..k (``attention.prefix_attention``; batches are right-padded, so real positions
    never see padding). Step-k input token: ``teacher[:, :, k]`` (training) or the draft's own greedy
    token of step k-1 (a real chain); hidden: its own output. With ``draft.drafting == "parallel"``
    (P-EAGLE) every step k >= 1 feeds the mask token and fc(mask_hidden) instead: the K tokens no longer
    depend on each other, as in vLLM's one-pass parallel drafting (speculators' P-EAGLE attention mask:
    a slot sees the context and the earlier slots of its own start).
    """
    B, T = input_ids.shape
    dev = draft.fc.weight.device
    ids = input_ids.to(dev)
    mask = attention_mask.to(dev).bool()
    if bool((mask[:, 1:] & ~mask[:, :-1]).any()):
        raise WorkbenchError("attention_mask is not right-padded (a 1 after a 0 in some row); "
                             "expected each row to be 1 on its tokens, then 0 on padding")
    pos = torch.arange(T, device=dev)
    scale = 1.0 / math.sqrt(draft.spec.head_dim)
    h = draft.project(features.to(dev))
    if teacher is None:
        tok = torch.zeros_like(ids)
        tok[:, :-1] = ids[:, 1:]                                  # x_{p+1}; last column has none
    else:
        tok = teacher[:, :, 0].to(dev)
    k0 = v0 = None
    own_k, own_v = [], []
    for k in range(K):
        q, kk, vv, residual = draft.qkv(h, draft.embed_tokens(tok), pos + k + (draft.rotary_offset if k else 0))
        if k == 0:
            k0, v0 = kk, vv
        else:
            own_k.append(kk)
            own_v.append(vv)
        out = prefix_attention(q, k0, v0, own_k, own_v, scale=scale, max_memory=max_memory)
        hk = draft.finish(residual, out)
        step = draft.logits(hk) if head is None else head(hk)
        yield step
        if k + 1 < K and draft.drafting == "parallel":       # P-EAGLE: every later slot is a masked one
            tok, h = draft.masked_slot(ids.shape)
        elif k + 1 < K:
            h = draft.next_hidden(hk)
            tok = teacher[:, :, k + 1].to(dev) if teacher is not None else \
                draft.to_target(step.argmax(-1) if head is None else step.ids)


def check_chain_inputs(features, input_ids, attention_mask, K):
    """One-line errors for the shapes of a parallel draft run (chains or trees) and its step count."""
    if input_ids.dim() != 2:
        raise WorkbenchError(f"input_ids has shape {list(input_ids.shape)}, expected [B, T]")
    if features.dim() != 3 or tuple(features.shape[:2]) != tuple(input_ids.shape):
        raise WorkbenchError(f"features have shape {list(features.shape)}, expected [B, T, 3*H_target] with "
                             f"[B, T] = {list(input_ids.shape)}")
    if tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise WorkbenchError(f"attention_mask has shape {list(attention_mask.shape)}, expected "
                             f"{list(input_ids.shape)}")
    if not isinstance(K, int) or isinstance(K, bool) or K < 1:
        raise WorkbenchError(f"K (draft steps) must be a positive integer, got {K!r}")


def run_chains(draft: Eagle3Draft, features: torch.Tensor, input_ids: torch.Tensor,
               attention_mask: torch.Tensor, K: int, *, acc_topk: int = 0,
               return_logits: bool = False, gaps: bool = False, max_memory=None) -> ChainOutput:
    """K greedy draft steps for every start position at once (the training-time-test layout).

        >>> import torch
        >>> cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4,
        ...                         "intermediate_size": 64})
        >>> d = Eagle3Draft.from_config(cfg, torch.randn(50, 32))
        >>> out = run_chains(d, torch.randn(2, 5, 96), torch.randint(0, 50, (2, 5)),
        ...                  torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), K=4, acc_topk=3)
        >>> out.tokens.shape, out.topk_ids.shape
        (torch.Size([2, 5, 4]), torch.Size([2, 5, 4, 3]))

    Chains whose bonus token x_{p+1} is padding or past the end (p >= length-1) are computed but
    meaningless; acceptance does not count them. The draft head (norm, lm_head, argmax, top-k) runs in
    position chunks sized from ``max_memory`` (``workbench.model.chunks``): no [B, T, Vd] logits unless
    ``return_logits`` asks for them. ``gaps``: each proposal's relative top-2 gap, (top - second logit) /
    max(|top|, 1) in fp32 (:func:`top2_gap`): how near the draft was to proposing another token (the live
    comparison's near-ties in the draft's proposals).
    """
    check_chain_inputs(features, input_ids, attention_mask, K)
    draft.check_ready()
    topk = acc_topk                     # top-k ids/log-probs kept per step (accuracy records; not eagle_topk)
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 0 or topk > draft.draft_vocab_size:
        raise WorkbenchError(f"acc_topk must be in 0..{draft.draft_vocab_size}, got {topk!r}")

    def head(hk):
        return head_chunks(hk, draft.logits, topk=topk, keep_logits=return_logits, max_memory=max_memory,
                           vocab=draft.draft_vocab_size, reduce=top2_gap if gaps else None)

    toks, tids, tlps, logs, gps = [], [], [], [], []
    with torch.no_grad():
        for step in unroll(draft, features, input_ids, attention_mask, K, head=head, max_memory=max_memory):
            toks.append(draft.to_target(step.ids))
            if topk:
                tids.append(draft.to_target(step.topk_ids))
                tlps.append(step.topk_logprobs)
            if return_logits:
                logs.append(step.logits)
            if gaps:
                gps.append(step.reduced[..., 0])
    return ChainOutput(tokens=torch.stack(toks, dim=2),
                       topk_ids=torch.stack(tids, dim=2) if topk else None,
                       topk_logprobs=torch.stack(tlps, dim=2) if topk else None,
                       logits=torch.stack(logs, dim=2) if return_logits else None,
                       gaps=torch.stack(gps, dim=2) if gaps else None)


def top2_gap(logits: torch.Tensor) -> torch.Tensor:
    """[n, V] logits → [n, 1] relative top-2 gap (top - second) / max(|top|, 1), fp32: a near-tie at a served
    dtype when it is within that dtype's relative step.

        >>> [round(g, 4) for g in top2_gap(torch.tensor([[5.0, 5.01, 0.0], [9.0, 1.0, 0.0]])).flatten().tolist()]
        [0.002, 0.8889]
    """
    top = logits.float().topk(2, dim=-1).values
    return ((top[:, :1] - top[:, 1:2]) / top[:, :1].abs().clamp_min(1.0)).float()


def check_one_sequence(features, input_ids, t: int, who: str, start: str, token: str) -> None:
    """One-line errors for a sequential reference's inputs: features [T, W], input_ids [T], 0 <= t <= T-2
    (the start needs the token x_(t+1) that follows it)."""
    if features.dim() != 2 or input_ids.dim() != 1 or features.shape[0] != input_ids.shape[0]:
        raise WorkbenchError(f"{who} takes one sequence: features [T, W] and input_ids [T], got "
                             f"{list(features.shape)} and {list(input_ids.shape)}")
    T = input_ids.shape[0]
    if not 0 <= t <= T - 2:
        raise WorkbenchError(f"{start} t={t} needs the {token} x_(t+1): expected 0 <= t <= {T - 2}")


def chain_reference(draft: Eagle3Draft, features: torch.Tensor, input_ids: torch.Tensor, t: int, K: int,
                    *, return_logits: bool = False):
    """One chain, sequentially with a KV cache: the exact reference for :func:`run_chains`.

        >>> import torch
        >>> cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4,
        ...                         "intermediate_size": 64})
        >>> d = Eagle3Draft.from_config(cfg, torch.randn(50, 32))
        >>> chain_reference(d, torch.randn(6, 96), torch.randint(0, 50, (6,)), t=3, K=2).shape
        torch.Size([2])

    The draft reads features h_0..h_t paired with tokens x_1..x_{t+1} one position at a time (its
    KV cache), then drafts: step k feeds its own greedy token (target id) and its own hidden at
    rotary position t+k (P-EAGLE parallel drafting: the mask token and fc(mask_hidden) instead). Returns
    LongTensor [K] (target ids), with ``return_logits`` also [K, Vd].
    """
    check_one_sequence(features, input_ids, t, "chain_reference", "chain start", "bonus token")
    if K < 1:
        raise WorkbenchError(f"K (draft steps) must be a positive integer, got {K!r}")
    draft.check_ready()
    dev = draft.fc.weight.device
    ids = input_ids.to(dev)
    scale = 1.0 / math.sqrt(draft.spec.head_dim)
    cache_k, cache_v = [], []

    def attend(h, token, position):
        q, k, v, residual = draft.qkv(h, draft.embed_tokens(token.view(1, 1)),
                                       torch.tensor([position], device=dev))
        cache_k.append(k)
        cache_v.append(v)
        keys, values = torch.cat(cache_k, dim=2), torch.cat(cache_v, dim=2)
        p = torch.softmax((q @ keys.transpose(-1, -2)).float() * scale, dim=-1).to(q.dtype)
        return draft.finish(residual, p @ values)

    tokens, logits_out = [], []
    with torch.no_grad():
        hs = draft.project(features[: t + 1].to(dev)[None])
        for p in range(t + 1):
            out = attend(hs[:, p: p + 1], ids[p + 1], p)
        for k in range(K):
            logits = draft.logits(out)[0, 0]
            tok = draft.to_target(logits.argmax())
            tokens.append(tok)
            logits_out.append(logits.float())
            if k + 1 < K and draft.drafting == "parallel":    # P-EAGLE: the mask token and fc(mask_hidden)
                mtok, mh = draft.masked_slot((1, 1))
                out = attend(mh, mtok[0, 0], t + k + 1 + draft.rotary_offset)
            elif k + 1 < K:
                out = attend(draft.next_hidden(out), tok, t + k + 1 + draft.rotary_offset)
    tokens = torch.stack(tokens)
    return (tokens, torch.stack(logits_out)) if return_logits else tokens


class DraftDescription(Rendered, dict):
    """What :func:`describe_draft` returns: a plain dict (JSON-ready) that renders as text."""

    def summary(self) -> str:
        """What ``workbench draft`` prints."""
        info = self
        f = info["features"]
        on = [k for k, v in f.items() if v] or ["none"]
        lines = [
            f"{info['path']}: {info['architecture']} ({info['format']} format), {info['parameters']:,} parameters "
            f"(without embed_tokens), {info['dtype']} on {info['device']}",
            f"  hidden {info['hidden_size']}, target hidden {info['target_hidden_size']} (fc input "
            f"{info['fc_input']}), heads {info['heads']}/{info['kv_heads']} kv, head_dim {info['head_dim']}, "
            f"mlp {info['intermediate_size']}, rope theta {info['rope_theta']:g} ({info['rope_scaling']})",
            f"  vocab {info['vocab_size']}, draft vocab {info['draft_vocab_size']}"
            + (f" (d2t maps to {info['t2d_coverage']} target ids)" if info["vocab_mapped"] else " (no mapping)"),
            f"  eagle_config layer ids {info['eagle_layer_ids']}, embed_tokens from {info['embed_source']}",
            f"  variant features on: {', '.join(on)}",
        ]
        lines += [f"  note: {n}" for n in info["notes"]]
        return "\n".join(lines)


def describe_draft(draft: Eagle3Draft) -> DraftDescription:
    """What the draft is: parameters, vocab sizes, eagle_config ids, dtype, variant features, notes.

        >>> import torch
        >>> cfg = new_draft_config({"vocab_size": 50, "hidden_size": 32, "num_attention_heads": 4,
        ...                         "intermediate_size": 64}, layer_ids=[1, 3, 4])
        >>> describe_draft(Eagle3Draft.from_config(cfg, torch.zeros(50, 32)))["eagle_layer_ids"]
        [1, 3, 4]
    """
    s = draft.spec
    n_params = sum(p.numel() for n, p in draft.named_parameters() if not n.startswith("embed_tokens"))
    return DraftDescription({
        "path": draft.path, "format": draft.source_format, "architecture": ARCHITECTURE,
        "parameters": n_params, "hidden_size": s.hidden_size, "target_hidden_size": s.target_hidden_size,
        "fc_input": 3 * s.target_hidden_size, "heads": s.num_heads, "kv_heads": s.num_kv_heads,
        "head_dim": s.head_dim, "intermediate_size": s.intermediate_size,
        "vocab_size": s.vocab_size, "draft_vocab_size": s.draft_vocab_size,
        "vocab_mapped": s.draft_vocab_size != s.vocab_size or bool(draft.d2t.any()),
        "t2d_coverage": int(draft.t2d.sum()),
        "eagle_layer_ids": draft.eagle_layer_ids, "dtype": str(draft.fc.weight.dtype).replace("torch.", ""),
        "device": str(draft.fc.weight.device), "embed_source": draft.embed_source,
        "rope_theta": s.rope_theta, "rope_scaling": (s.rope_scaling or {}).get("rope_type", "default"),
        "features": {"fc_bias": s.fc_bias, "fc_norm": s.fc_norm, "norm_before_fc": s.norm_before_fc,
                     "norm_output": s.norm_output,
                     "norm_before_residual": s.norm_before_residual, "attention_bias": s.attention_bias,
                     "target_hidden_size_differs": s.target_hidden_size != s.hidden_size},
        "notes": list(draft.notes),
    })
