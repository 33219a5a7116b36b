"""Where dbtester keeps its own files, and the check that a directory can be
written before anything depends on it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from dbtester.errors import DbtesterError

__all__ = [
    "SAFE_NAME",
    "dbtester_home",
    "ensure_writable",
    "from_the_case",
    "locked",
    "write_private",
]

#: a name from outside (a request, a results directory) that becomes one path
#: component: letters, digits, . _ -, never "..", "/" or empty. Always fullmatch.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def from_the_case(value: str | None, context: dict[str, object] | None) -> str | None:
    """A path a test case names, relative ones taken from its folder (the
    ``folder`` of the validation context; as written without one)."""
    folder = (context or {}).get("folder")
    if value is None or not isinstance(folder, Path) or Path(value).is_absolute():
        return value
    return str(folder / value)


def write_private(path: Path, text: str) -> Path:
    """``text`` into ``path``, readable by this user alone from its first
    byte (a token, a key), replacing what was there; the path."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        out.write(text)
    return path


def dbtester_home() -> Path:
    """``$DBTESTER_HOME``, default ``~/.cache/dbtester``: installed databases,
    run scratch, the wheelhouse."""
    return Path(os.environ.get("DBTESTER_HOME") or Path.home() / ".cache" / "dbtester")


def ensure_writable(root: Path, what: str = "data root") -> None:
    """Make ``root`` if needed and prove a file can be written there; one line
    naming ``what`` and the path otherwise (the agent's data root, the
    controller's $DBTESTER_HOME and --out)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise DbtesterError(f"{what} {root} is not writable: {exc.strerror}") from None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (made if needed) while the body runs:
    two dbtester processes sharing a home take turns (installs, wheel builds)."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` becomes ``source``'s content: a hard link where the file
    system allows, else a copy (an existing ``target`` is replaced)."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
