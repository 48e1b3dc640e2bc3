"""A server flag read as the engine's own parser reads it: an exact option, else the one it is a unique prefix of
(argparse's ``allow_abbrev``), from the engine's parser table (``engines/data/flags.json``, ``bench/flag_tables.py``).

    >>> from workbench.engines.options import resolve
    >>> resolve("sglang", "--speculative-algo")
    ('speculative_algorithm', True)
    >>> resolve("sglang", "--speculative-draft-model")
    ('speculative_draft_model_path', True)
    >>> resolve("vllm", "--speculative_config")             # FlexibleArgumentParser: underscores are dashes
    ('speculative_config', True)
    >>> resolve("vllm", "--no-such-flag") is None
    True
    >>> resolve("sglang", "--speculative-algo", release="0.5.14")         # an older release's own parser
    ('speculative_algorithm', True)
    >>> parser_release("sglang"), parser_release("sglang", "0.5.14"), parser_release("sglang", "0.5.1")
    ('0.5.23', '0.5.14', '0.5.23')

Model cards write the short forms (Qwen3.x and DeepSeek cards: ``--speculative-algo NEXTN``); a lint that read them
as unknown flags would call a valid command "no speculation".
"""

from __future__ import annotations

from workbench.core.errors import WorkbenchError
from workbench.engines.tables import table


def _parser(engine: str, release: str | None = None) -> dict:
    """The parser table of ``engine`` at ``release`` (``flags.json`` key ``engine@release``), else its newest."""
    flags = table("flags")
    return flags.get(f"{engine}@{release}") or flags[engine] if release else flags[engine]


def parser_release(engine: str, release: str | None = None) -> str:
    """The release whose parser table reads ``engine``'s flags for ``release`` (the newest when none is stored)."""
    return _parser(engine, release)["release"]


def resolve(engine: str, flag: str, release: str | None = None) -> tuple[str, bool] | None:
    """(dest, takes a value) of ``flag`` (``--name``, without ``=value``) as ``engine``'s parser reads it (at
    ``release`` when its table is stored: :func:`parser_release`); None when it is no option of the parser. An
    ambiguous prefix is the parser's own error, in one line."""
    parser = _parser(engine, release)
    opts = parser["options"]
    name = flag if flag.startswith("--") else "--" + flag.lstrip("-")
    if engine == "vllm":                      # FlexibleArgumentParser turns --a_b into --a-b before parsing
        name = "--" + name[2:].replace("_", "-")
    if name in opts:
        return opts[name]["dest"], opts[name]["value"]
    hits = [o for o in opts if o.startswith(name)]
    if not parser.get("allow_abbrev", True) or not hits:
        return None
    dests = {opts[o]["dest"] for o in hits}
    if len(dests) > 1:
        raise WorkbenchError(f"server command: {flag} is ambiguous: {engine} {parser['release']}'s parser could take it for "
                             f"{', '.join(hits[:6])}{' ...' if len(hits) > 6 else ''} (it refuses such a command)")
    return opts[hits[0]]["dest"], opts[hits[0]]["value"]


__all__ = ["parser_release", "resolve"]
