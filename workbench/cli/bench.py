"""`workbench bench`: every benchmark in bench/ in one run; prints one table, writes bench/results.json.

    $ workbench bench --quick --out /tmp/results.json

The same as ``python -m bench.run`` from the checkout root: ``bench`` is the checkout's benchmark
package (installed beside ``workbench`` by ``pip install -e .``), not part of the library.
"""

from workbench.core.errors import WorkbenchError
from workbench.report import benchmark

NAME = "bench"
HELP = "run every benchmark in bench/ (demo + deep synthetic target), print one table, write bench/results.json"


def add_arguments(parser):
    benchmark.add_arguments(parser)


def run(args):
    try:
        from bench import run as runner
    except ModuleNotFoundError as e:
        if e.name not in ("bench", "bench.run"):
            raise
        raise WorkbenchError("the bench package is not importable: run `python -m bench.run` from the source "
                             "checkout, or reinstall it (`pip install -e .`) so that `workbench bench` finds "
                             "bench/") from None
    if not (runner.ROOT / "pyproject.toml").is_file():
        raise WorkbenchError(f"{runner.ROOT}: not a source checkout (`workbench bench` measures the checkout's "
                             "demo and writes bench/results.json there)")
    return runner.run(args)
