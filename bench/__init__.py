"""The benchmarks, one module per part of the pipeline; ``bench.run`` runs them all into one table.

    $ python -m bench.run --quick --out /tmp/results.json   # from the checkout root (also: workbench bench)
    $ python -m bench.capture --repeats 11                  # one benchmark alone, with its own options

Each module exposes ``measure(...) -> list[dict]`` (the figure schema of ``workbench.report.benchmark``);
what they share (the checkout root, the demo to measure on, device sync, peak memory of a call) is in
``bench.common``. Numbers are measured, never asserted.
"""
