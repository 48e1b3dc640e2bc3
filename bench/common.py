"""What the benchmarks share: the checkout root, the demo they measure on, device sync, peak memory.

    >>> from bench.common import ROOT, peak_rss
    >>> (ROOT / "bench" / "common.py").is_file()
    True
    >>> peak, before, got = peak_rss(lambda: bytearray(8 << 20))
    >>> len(got), peak >= before
    (8388608, True)
"""

from __future__ import annotations

import ctypes
import gc
import os
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def find_demo(demo=None) -> Path:
    """The demo to measure: ``demo`` when given, else data/demo when built, else the smoke demo (built once)."""
    from workbench.demo.build import ensure_demo, read_manifest

    if demo:
        read_manifest(demo)                              # WorkbenchError naming the folder when it is not a demo
        return Path(demo)
    if (ROOT / "data" / "demo" / "manifest.json").is_file():
        return ROOT / "data" / "demo"
    print("data/demo is not built: using the smoke demo in data/demo-smoke", flush=True)
    return ensure_demo(ROOT / "data" / "demo-smoke", size="smoke", progress=False)


def sync(device) -> None:
    """Wait for the GPU (a timing must include the kernels it launched); nothing on CPU."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def rss_bytes() -> int:
    """This process's resident set size now (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss(fn, every_s: float = 0.0002):
    """``(peak RSS bytes while fn() runs, RSS before it, what fn returned)``, sampled every ``every_s``
    seconds after a full release (gc, glibc ``malloc_trim``) so the baseline is what is really held."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = rss_bytes()
    state = {"peak": before, "stop": False}

    def sample():
        while not state["stop"]:
            state["peak"] = max(state["peak"], rss_bytes())
            time.sleep(every_s)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        got = fn()
    finally:
        state["stop"] = True
        th.join()
    return max(state["peak"], rss_bytes()), before, got


def splice(doc, begin: str, end: str, body: str) -> None:
    """Replace what lies between the markers ``begin`` and ``end`` of the file ``doc`` with ``body`` (a bench
    command's ``--docs``); one line when a marker is missing."""
    from workbench.core.errors import WorkbenchError

    text = Path(doc).read_text(encoding="utf-8")
    if begin not in text or end not in text:
        raise WorkbenchError(f"{doc}: no {begin} ... {end} markers")
    a, b = text.index(begin) + len(begin), text.index(end)
    Path(doc).write_text(text[:a] + "\n" + body + "\n" + text[b:], encoding="utf-8")
