"""`workbench bench`: every benchmark in bench/ in one run; prints one table, writes bench/results.json.

    $ workbench bench --quick --out /tmp/results.json
"""

from workbench import benchmark
from workbench.errors import WorkbenchError

NAME = "bench"
HELP = "run every benchmark in bench/ (demo + deep synthetic target), print one table, write bench/results.json"


def add_arguments(parser):
    benchmark.add_arguments(parser)


def run(args):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "run.py"
    if not path.is_file():
        raise WorkbenchError(f"{path}: not found (`workbench bench` runs from a source checkout that has bench/)")
    spec = importlib.util.spec_from_file_location("wb_bench_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.run(args)
