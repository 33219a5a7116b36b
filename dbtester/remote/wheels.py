"""The wheels an agent machine installs from: dbtester's own and every dependency.

Server machines often have no route to PyPI (benchmark labs, private subnets),
so ``agents up`` brings everything: the dependencies are downloaded once into
a cache (``$DBTESTER_HOME/wheelhouse/<key>``, keyed by this Python's tag and
the requirement list), and dbtester's own wheel — with its compiled load
engine — is built from the source tree on each ``up`` (offline: its build
backend comes from the cache; Rust's cargo reuses ``$DBTESTER_HOME/
wheel-build/target``, so only the first build compiles every crate).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from dbtester.errors import DbtesterError
from dbtester.util.paths import dbtester_home, locked

__all__ = ["Wheelhouse", "build_wheelhouse", "python_tag", "source_tree"]

# The build backend pyproject.toml names; wheels of it go into the cache so the
# source tree builds without an index (locally and, if ever needed, remotely).
BUILD_REQUIREMENTS = ("maturin>=1.9,<2",)
#: what the wheel is built from: the package, the engine's crate and the metadata
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "dbtester", "engine")
#: never copied: build output, caches, a compiled engine from an editable install
IGNORED = ("__pycache__", "*.pyc", "target", "_engine*.so")


@dataclass(frozen=True)
class Wheelhouse:
    directory: Path  # every dependency's wheel
    dbtester_wheel: Path

    def files(self) -> list[Path]:
        return sorted([*self.directory.glob("*.whl"), self.dbtester_wheel])


def python_tag() -> str:
    """e.g. ``cp311-x86_64``: wheels built here install on machines with the same."""
    return f"cp{sys.version_info.major}{sys.version_info.minor}-{sysconfig.get_platform()}"


def source_tree() -> Path | None:
    """The source checkout this dbtester runs from (an editable install), if any."""
    candidate = Path(__file__).resolve().parents[2]
    if (candidate / "pyproject.toml").is_file() and (candidate / "dbtester").is_dir():
        return candidate
    return None


def _requirements() -> list[str]:
    try:
        required = metadata.requires("dbtester") or []
    except metadata.PackageNotFoundError:
        raise DbtesterError("dbtester is not installed as a package (pip install -e .)") from None
    return sorted(r for r in required if "extra ==" not in r)


def _cache_dir(requirements: list[str]) -> Path:
    key = hashlib.sha256(
        json.dumps([python_tag(), requirements, BUILD_REQUIREMENTS]).encode()
    ).hexdigest()[:16]
    return dbtester_home() / "wheelhouse" / key


def _pip(args: list[str], what: str, extra_env: dict[str, str] | None = None) -> None:
    # A fixed timestamp inside the zip: the same source gives the same wheel,
    # byte for byte, so `agents up` can tell "unchanged" by its digest.
    env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800", **(extra_env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise DbtesterError(f"cannot {what} (pip exited {done.returncode}):\n{tail}")


def build_wheelhouse(
    wheel: Path | None = None, say: Callable[[str], None] = print, *, refresh: bool = False
) -> Wheelhouse:
    """The dependency wheels (from the cache, or downloaded into it) and dbtester's
    wheel: ``wheel`` when given, else built from the source tree."""
    requirements = _requirements()
    cache = _cache_dir(requirements)
    if refresh and cache.exists():
        shutil.rmtree(cache)
    if not (cache / ".complete").exists():
        say(f"downloading {len(requirements)} dependencies' wheels into {cache} (once)")
        cache.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".wheelhouse-", dir=cache.parent))
        try:
            _pip(
                ["wheel", "-q", "--wheel-dir", str(staging), *requirements],
                "download the dependencies' wheels",
            )
            _pip(
                ["wheel", "-q", "--no-deps", "--wheel-dir", str(staging), *BUILD_REQUIREMENTS],
                "download the build backend's wheel",
            )
            (staging / ".complete").write_text("\n".join(requirements) + "\n")
            if cache.exists():
                shutil.rmtree(cache)
            staging.rename(cache)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if wheel is not None:
        if not wheel.is_file() or wheel.suffix != ".whl":
            raise DbtesterError(f"--wheel {wheel}: not a wheel file")
        return Wheelhouse(cache, wheel)
    return Wheelhouse(cache, _build_own_wheel(cache))


def _build_own_wheel(cache: Path) -> Path:
    source = source_tree()
    if source is None:
        raise DbtesterError(
            "dbtester does not run from a source tree, so its wheel cannot be built here;"
            " pass --wheel FILE (the wheel you installed from)"
        )
    # A directory of this process's own: concurrent `agents up` runs sharing a
    # DBTESTER_HOME must not remove each other's wheel mid-copy.
    out = Path(tempfile.mkdtemp(prefix="own-", dir=dbtester_home() / "wheelhouse"))
    atexit.register(shutil.rmtree, out, True)
    build = dbtester_home() / "wheel-build"
    build.mkdir(parents=True, exist_ok=True)
    with locked(build / ".lock"):
        # A clean copy at a fixed path: nothing stale from the checkout (deleted
        # modules, build output) reaches the wheel, and the same sources compile
        # to the same bytes (paths included), so an unchanged tree gives an
        # unchanged wheel. copy2 keeps mtimes: cargo rebuilds only what changed.
        tree = build / "src"
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir()
        for name in SOURCES:
            path = source / name
            if path.is_dir():
                shutil.copytree(path, tree / name, ignore=shutil.ignore_patterns(*IGNORED))
            elif path.is_file():
                shutil.copy2(path, tree / name)
        # Offline: the build backend comes from the cache, not an index.
        _pip(
            [
                "wheel",
                "-q",
                "--no-deps",
                "--no-index",
                "--find-links",
                str(cache),
                "--wheel-dir",
                str(out),
                str(tree),
            ],
            f"build dbtester's wheel from {source}",
            # "pypi": the lowest manylinux tag the compiled engine's glibc
            # symbols allow (manylinux_2_34 from Debian 12), so pip on any
            # glibc Linux that new installs it, and nothing else does.
            {
                "CARGO_TARGET_DIR": str(build / "target"),
                "MATURIN_PEP517_ARGS": "--compatibility pypi",
            },
        )
    wheels = sorted(out.glob("dbtester-*.whl"))
    if len(wheels) != 1:
        raise DbtesterError(f"building dbtester's wheel in {out} gave {len(wheels)} wheels")
    return wheels[0]
