"""A pidfile for an agent run as a plain background process (no systemd).

``dbtester agents down`` stops the agent by the PID written here; it checks the
PID still belongs to a ``dbtester agent serve`` before signalling, so a stale
file never makes it kill an unrelated process that reused the number.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from dbtester.errors import BadInputError, DbtesterError

__all__ = ["is_agent", "pidfile"]


def is_agent(pid: int) -> bool:
    """True when ``pid`` is a live ``dbtester agent serve`` process."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"agent" in argv and b"serve" in argv and any(b"dbtester" in a for a in argv)


@contextlib.contextmanager
def pidfile(path: Path | None) -> Iterator[None]:
    """Hold ``path`` with this process's PID while serving; refuse a second agent."""
    if path is None:
        yield
        return
    if not path.name or path.is_dir():
        raise BadInputError(f"--pidfile {str(path)!r} must name a file")
    with contextlib.suppress(OSError, ValueError):
        other = int(path.read_text().strip())
        if other != os.getpid() and is_agent(other):
            raise DbtesterError(f"an agent is already running with pidfile {path} (pid {other})")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(f"{os.getpid()}\n")
    partial.replace(path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            if int(path.read_text().strip()) == os.getpid():
                path.unlink()
