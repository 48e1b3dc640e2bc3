"""``workbench <command>``: argparse only; every command lives in its own file of this package.

Each command module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.
A :class:`~workbench.errors.WorkbenchError` becomes ``error: <message>`` on stderr and exit code 2.
Every ``--help`` shows the options' defaults (:class:`HelpFormatter`), and every output path is checked
right after parsing, before any model is loaded (:func:`check_outputs`).

    $ workbench inspect data/demo/val.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys

from workbench.core.errors import WorkbenchError

# One module per command, in the order `workbench --help` lists them.
COMMANDS = ["inspect", "wiring", "draft", "accept", "diagnose", "tune", "demo", "report", "sglang", "vllm", "rewire",
            "bench", "prepare", "regenerate", "foreign"]


# Output options: dest -> "file" or "folder"; a folder per command where --out names a folder.
OUTPUT_FILES = ("json", "per_chain", "html", "out", "by_position_figure")
OUTPUT_FOLDERS = {("demo", "out"), ("report", "out"), ("rewire", "out")}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each option's default appended, unless it is None/False or the help already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text.lower() or action.default == []:
            return text
        return super()._get_help_string(action)


def parsers(parser):
    """``parser`` and every sub-command parser below it (``sglang lint`` included), depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for p in dict.fromkeys(action.choices.values()):
                yield from parsers(p)


def check_outputs(args) -> None:
    """Check every output path given in ``args`` (:func:`workbench.files.check_output`) before the work."""
    from workbench.core.files import check_output

    for dest in OUTPUT_FILES:
        value = getattr(args, dest, None)
        if isinstance(value, str) and value and value != "-":
            check_output(value, folder=(args.command, dest) in OUTPUT_FOLDERS,
                         what="--" + dest.replace("_", "-"))


def add_inputs_arguments(parser, *, draft: str = "EAGLE-3 draft folder (config.json + model.safetensors)",
                         data: str = "data: tokenised rows, or conversations tokenised with the target's chat "
                                     "template (jsonl/json/parquet/save_to_disk, hf:NAME:SPLIT:N; docs/data.md)",
                         chat: bool = False) -> None:
    """``--target``, ``--draft``, ``--data``: the three inputs every evaluating command takes; with ``chat``, also
    the chat template options for a conversation file (:func:`chat_data` reads them)."""
    parser.add_argument("--target", required=True, help="HF target model folder")
    parser.add_argument("--draft", required=True, help=draft)
    parser.add_argument("--data", required=True, help=data)
    if chat:
        add_chat_template_arguments(parser)


def add_run_arguments(parser, *, json_help: str) -> None:
    """``--limit``, ``--batch-size`` and ``--json``, shared by accept and diagnose."""
    parser.add_argument("--limit", type=int, default=None, help="use the first N samples")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per forward pass")
    parser.add_argument("--json", metavar="OUT", help=json_help)


def add_chat_template_arguments(parser) -> None:
    """``--chat-template NAME|FILE`` and ``--chat-template-kwargs JSON`` (prepare, regenerate, and for a
    conversation file given as --data: accept, diagnose, tune)."""
    parser.add_argument("--chat-template", default=None, metavar="NAME|FILE",
                        help="a named template of the tokenizer (additional_chat_templates/NAME.jinja, e.g. the "
                             "demo's 'plain') or a .jinja file, instead of its default template (as SGLang's "
                             "--chat-template)")
    parser.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                        help='extra template variables, e.g. \'{"enable_thinking": false}\' (Qwen3 non-thinking)')


def chat_data(args):
    """``args.data``, or with ``--chat-template``/``--chat-template-kwargs`` a :class:`workbench.load.chat.ChatFile`
    (accept, diagnose, tune: the conversation file read with that template)."""
    from workbench.load.chat import ChatFile

    kwargs = chat_template_kwargs(getattr(args, "chat_template_kwargs", None))
    if args.data is None or (getattr(args, "chat_template", None) is None and kwargs is None):
        return args.data
    return ChatFile(args.data, args.chat_template, kwargs)


def chat_template_kwargs(text: str | None) -> dict | None:
    """``--chat-template-kwargs``: a JSON object (None when not given), else a one-line WorkbenchError.

        >>> chat_template_kwargs('{"enable_thinking": false}')
        {'enable_thinking': False}
    """
    import json

    if not text:
        return None
    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as e:
        raise WorkbenchError(f"--chat-template-kwargs: not JSON ({e.msg}); expected e.g. "
                             "'{\"enable_thinking\": false}'") from None
    if not isinstance(kwargs, dict):
        raise WorkbenchError(f"--chat-template-kwargs: got {type(kwargs).__name__} {text[:40]}: expected a JSON object")
    return kwargs


def add_device_arguments(parser) -> None:
    """The flags every command that loads models shares: --device, --dtype, --trust-remote-code, --quiet."""
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16 on CUDA), fp32, bf16, fp16")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="allow the target's own Python code from its folder (off unless asked)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def add_shape_arguments(parser, what: str = "draft depth") -> None:
    """--steps/-K, --eagle-topk, --num-draft-tokens and --sglang-args: the drafting shape (workbench.engines.flags)."""
    parser.add_argument("--steps", "-K", type=int, default=None,
                        help=f"{what}: SGLang's --speculative-num-steps (default 4; docs/trees.md)")
    parser.add_argument("--eagle-topk", type=int, default=None, metavar="k",
                        help="tree branching, SGLang's --speculative-eagle-topk (default 1 = a chain; 1 forces "
                             "num_draft_tokens = steps + 1, as the server does)")
    parser.add_argument("--num-draft-tokens", type=int, default=None, metavar="N",
                        help="tokens verified per step including the root, SGLang's --speculative-num-draft-tokens "
                             "(needed when --eagle-topk > 1; N-1 <= k + (S-1)*k^2)")
    parser.add_argument("--sglang-args", default=None, metavar="CMD",
                        help='take steps, eagle_topk and num_draft_tokens from a launch command, e.g. "python -m '
                             'sglang.launch_server ... --speculative-num-steps 5 ..." (SGLang\'s own adjustments '
                             "and per-architecture auto-defaults applied)")


def add_sampling_arguments(parser) -> None:
    """``--temperature``, ``--top-p``, ``--top-k``: the served sampling settings (docs/sampling.md).

    ``--top-k`` is the SAMPLING top-k (SGLang's ``top_k``); the tree's branching is ``--eagle-topk`` and
    the accuracy record ``--acc-topk``."""
    parser.add_argument("--temperature", type=float, default=0.0, metavar="T",
                        help="the served temperature (0 = greedy); > 0 matches the drafts against the data's tokens, "
                             "which must be sampled at these settings (workbench regenerate --temperature)")
    parser.add_argument("--top-p", type=float, default=1.0, metavar="P", help="the served top_p (1 = off)")
    parser.add_argument("--top-k", type=int, default=-1, metavar="K",
                        help="the served SAMPLING top_k (-1 = off; not --eagle-topk, the tree's branching)")


def with_sampling(setting, args):
    """``setting`` with the sampling of ``--temperature/--top-p/--top-k`` (checked: a one-line error)."""
    from workbench.core.sampling import Sampling, apply_sampling

    return apply_sampling(setting, Sampling(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k))


def engine_and_shape(args):
    """The engine (:func:`engine_of`) and the drafting shape (:func:`resolve_shape`) of a run."""
    engine = engine_of(args)
    return engine, resolve_shape(args, engine=engine)


def resolve_shape(args, engine=None):
    """The DraftingShape of a command's shape flags; prints its notices (one line each)."""
    from workbench.engines.flags import drafting_shape, target_architecture

    shape = drafting_shape(args.steps, args.eagle_topk, args.num_draft_tokens, sglang_args=args.sglang_args,
                           engine=engine, target_arch=target_architecture(args.target))
    for n in shape.notices:
        print(f"notice: {n}")
    return shape


def add_torchrun_arguments(parser) -> None:
    """--device-map and --shard-dir: for targets larger than one GPU and resumable runs under torchrun."""
    parser.add_argument("--device-map", default=None, metavar="MAP",
                        help="e.g. auto: spread a target larger than one GPU over the visible GPUs "
                             "(under torchrun: one process per node)")
    parser.add_argument("--shard-dir", default=None, metavar="DIR",
                        help="per-rank result files for resuming (default under torchrun: <json>.shards)")


def add_engine_arguments(parser, *, default: str | None = None, what: str = "the engine") -> None:
    """``--engine NAME`` (every record of :mod:`workbench.engines.records`) and the deprecated ``--sglang-rule``."""
    from workbench.engines.records import ENGINE_NAMES

    parser.add_argument("--engine", default=default, type=str.lower, choices=list(ENGINE_NAMES), metavar="NAME",
                        help=f"{what} (one of {', '.join(ENGINE_NAMES)}; `workbench wiring --engines` lists "
                             f"the version each stands for){'' if default is None else f'; default {default}'}")
    parser.add_argument("--sglang-rule", choices=["classic", "first-id-1"], default=None,
                        help="deprecated: use --engine sglang-2026.04 (classic) or --engine sglang (first-id-1)")


def add_subcommands(parser, name: str, subcommands) -> None:
    """A command group (``workbench sglang ...``, ``workbench vllm ...``): each ``add(sub)`` of ``subcommands`` adds
    one sub-command whose parser sets ``sub_run`` to its function; :func:`run_subcommand` calls it."""
    sub = parser.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")
    for add in subcommands:
        add(sub)
    parser.set_defaults(group_parser=parser)


def run_subcommand(args) -> int:
    """Run the sub-command the user named (usage and exit 2 when none was named)."""
    fn = getattr(args, "sub_run", None)
    if fn is None:
        args.group_parser.print_help()
        return 2
    return fn(args)


def add_live_arguments(p, *, kind: str, url: str, timeout: float) -> None:
    """The options every live ``compare`` shares: the server, the models and data, the request limits, the
    wirings (``kind``: "SGLang" or "vLLM"; ``url``: an example URL; ``timeout``: the default per request)."""
    p.add_argument("--url", required=True, help=f"the {kind} server, e.g. {url} (only this URL is contacted)")
    p.add_argument("--target", required=True, metavar="DIR", help="the target model the server runs")
    p.add_argument("--draft", required=True, metavar="DIR", help="the EAGLE-3 draft the server runs")
    p.add_argument("--data", required=True, metavar="PATH", help="samples (prompt + response length), as for accept")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="first N samples only")
    p.add_argument("--concurrency", type=int, default=4, metavar="C", help="requests in flight at most (default 4)")
    p.add_argument("--timeout", type=float, default=timeout, metavar="S",
                   help=f"seconds per request (default {timeout:g})")
    p.add_argument("--retries", type=int, default=3, help="retries on connection errors, timeouts, HTTP 5xx (default 3)")
    p.add_argument("--trained-wiring", metavar="SPEC", help="taps the draft was trained on (default: its config)")
    p.add_argument("--wiring", action="append", default=[], metavar="SPEC", help="an extra wiring to try (repeatable)")


def engine_of(args) -> str | None:
    """The engine a command runs with: ``--engine``, or the deprecated ``--sglang-rule`` mapped to a
    SGLang record (with a notice on stderr)."""
    rule = getattr(args, "sglang_rule", None)
    engine = getattr(args, "engine", None)
    if rule is None:
        return engine
    named = {"classic": "sglang-2026.04", "first-id-1": "sglang"}[rule]
    if engine not in (None, "sglang", "sglang-2026.04"):
        print(f"notice: --sglang-rule is deprecated and ignored with --engine {engine}", file=sys.stderr)
        return engine
    print(f"notice: --sglang-rule {rule} is deprecated: use --engine {named}", file=sys.stderr)
    return named


def build_parser() -> argparse.ArgumentParser:
    from workbench import __version__

    parser = argparse.ArgumentParser(prog="workbench", description=(
        "Why does my EAGLE-3 draft underperform when served? Offline acceptance, wiring diagnosis, reports."))
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        mod = importlib.import_module(f"workbench.cli.{name}")
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    for p in parsers(parser):
        p.formatter_class = HelpFormatter
    return parser


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM (``kill PID``) handled as Ctrl-C inside the block, so that ``finally`` clauses run: every server a
    command started is stopped by its pid, partial files are removed, finished work is kept.

        >>> with terminate_as_interrupt():
        ...     signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        True
    """
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:                  # not the main thread: leave the signal alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        with terminate_as_interrupt():
            check_outputs(args)
            return int(args._run(args) or 0)
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `workbench ... | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("interrupted (finished work is kept; re-run to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
