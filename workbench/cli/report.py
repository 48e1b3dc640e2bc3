"""`workbench report`: execute the notebooks and export shareable HTML pages plus an index.

    $ workbench report --out reports/ --no-code -p demo data/demo -p size smoke --notebooks 01,03

Exit codes: 0 every page ran; 1 a notebook failed for another reason (its page shows the error);
2 bad input (unknown notebook or parameter, or a notebook stopped on a WorkbenchError, e.g. a
missing data file). The pages and ``index.html`` are written in every case.
"""

from __future__ import annotations

import sys

NAME = "report"
HELP = "run the notebooks (papermill) and export self-contained HTML pages plus index.html"


def add_arguments(parser):
    parser.add_argument("--out", default="reports", help="output folder (default: reports/)")
    parser.add_argument("--no-code", action="store_true", help="hide code cells in the HTML pages")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="notebook parameter, e.g. -p demo data/demo -p size smoke -p steps 4 (repeatable)")
    parser.add_argument("--notebooks", metavar="LIST", help="which notebooks, e.g. 01,03 (default: all present)")
    parser.add_argument("--notebook-dir", metavar="DIR", help="run the notebooks of DIR instead of the project's notebooks/")
    parser.add_argument("--kernel", default=None, help="Jupyter kernel name (default: python3)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per notebook cell (default 3600)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args) -> int:
    from workbench.core.errors import WorkbenchError
    from workbench.report.export import parse_value, run_report
    from workbench.report.foreign import cards

    params = dict(args.parameter)
    rep = run_report(args.out, notebooks=args.notebooks, parameters=params, no_code=args.no_code,
                     folder=args.notebook_dir, kernel_name=args.kernel, timeout=args.timeout,
                     progress=not args.quiet, cards=cards({k: parse_value(v) for k, v in params.items()}))
    print(f"report: {rep.index}")
    for p in rep.failed:
        print(f"{p.name} failed: {p.error} (see {p.html or p.name})", file=sys.stderr)
    user = [p for p in rep.failed if p.error.startswith("WorkbenchError")]
    if user:
        raise WorkbenchError(f"notebook {user[0].name}: {user[0].error.split(': ', 1)[-1]}")
    return 1 if rep.failed else 0
