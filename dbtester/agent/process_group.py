"""A database's process group: started in a session of its own
(``start_new_session``), so a signal to the group reaches every process the
database spawned, by process group and never by name.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from dbtester.errors import MemberError
from dbtester.util.procs import as_user, with_parent_death_signal

__all__ = [
    "in_state",
    "kill_group",
    "log_tail",
    "signal_group",
    "spawn_group",
    "terminate_group",
]

# What a database process inherits: enough to run, none of the agent's or the
# controller's secrets (tokens, cloud credentials) that its logs could reveal.
_PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "JAVA_HOME", "USER")


def _database_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in _PASSED_ENV}


def spawn_group(
    argv: list[str],
    env: Mapping[str, str],
    cwd: Path,
    output: Path,
    user: str | None = None,
) -> subprocess.Popen[bytes]:
    """``argv`` run in ``cwd`` as the leader of a process group of its own,
    its stdout and stderr appended to ``output``, as ``user`` when given;
    MemberError when it cannot be run at all."""
    with output.open("ab") as out:
        try:
            command = with_parent_death_signal(argv)
            if user is not None:
                command = as_user(command, user)
            return subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env={**_database_environment(), **env},
                start_new_session=True,  # its own process group: a stop reaches all of it
            )
        except OSError as exc:
            raise MemberError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None


def in_state(
    process: subprocess.Popen[bytes] | None,
    state: str,
    states: tuple[str, ...],
    action: str,
    what: str,
) -> subprocess.Popen[bytes]:
    """``process`` (``what``, e.g. "etcd member 1"), when its ``state`` is one
    of ``states``, which allow ``action``; MemberError saying so otherwise."""
    if state not in states or process is None:
        raise MemberError(f"cannot {action} {what}: it is {state}, not {' or '.join(states)}")
    return process


def signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """``sig`` to the process group ``process`` leads; quiet when the group is
    gone already."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def kill_group(process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL whatever is left of the group (nothing when none was started)."""
    if process is not None:
        signal_group(process, signal.SIGKILL)


def terminate_group(
    process: subprocess.Popen[bytes] | None, grace: float, log: logging.Logger
) -> bool:
    """SIGTERM the group, wait ``grace`` seconds for its leader, then SIGKILL
    it; True when it took the SIGKILL. Whatever else is left in the group is
    killed either way."""
    if process is None or process.poll() is not None:
        kill_group(process)  # anything it left behind in its group
        return False
    signal_group(process, signal.SIGTERM)
    try:
        process.wait(grace)
        kill_group(process)
        return False
    except subprocess.TimeoutExpired:
        log.warning("still running %.1fs after SIGTERM: SIGKILL to group %d", grace, process.pid)
        signal_group(process, signal.SIGKILL)
        process.wait()
        return True


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 16384))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"
