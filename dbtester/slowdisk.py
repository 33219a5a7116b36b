"""The slow-disk layer's program, ``dbtester-slowfs``: a FUSE passthrough
whose fsync can be made slow (its Go source is ``agent/slowfs/``).

A test case with a ``slow_disk`` fault needs it on every agent that runs a
member: ``dbtester run`` and ``install --for`` build it here into
``$DBTESTER_HOME/slowfs/<version>/`` like a database version, and ``agents
up`` copies it to the hosts. Its version is a digest of its source, so a
changed layer is built and shipped again, never mixed with an older one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from dbtester.config import TestCase
from dbtester.databases import get_kind
from dbtester.install import Installed, LocalGoBuild, ensure_installed, find_installed
from dbtester.util.progress import Reporter

__all__ = ["BINARY", "KIND", "SOURCE", "VERSION", "find", "install", "install_target", "needed"]

#: where its installs live under $DBTESTER_HOME, beside the database kinds
KIND = "slowfs"
BINARY = "dbtester-slowfs"
SOURCE = Path(__file__).parent / "agent" / "slowfs"


def _version() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update(name.encode() + b"\0" + (SOURCE / name).read_bytes())
    return f"src-{digest.hexdigest()[:12]}"


VERSION = _version()


def needed(case: TestCase) -> bool:
    """Whether the case's faults make a disk slow."""
    return any(fault.action == "slow_disk" for fault in case.faults)


def find() -> Installed | None:
    return find_installed(KIND, VERSION)


def install(reporter: Reporter | None = None) -> Installed:
    """The layer's program built (instant when it is); InstallError when it
    cannot be (no Go, no module proxy)."""
    return ensure_installed(KIND, VERSION, [LocalGoBuild(SOURCE, BINARY)], reporter)


def install_target(kind: str, version: str, reporter: Reporter | None = None) -> Installed:
    """What a host runs, installed: a database kind's version, or this layer."""
    if kind == KIND:
        return install(reporter)
    return get_kind(kind).install(version, reporter)
