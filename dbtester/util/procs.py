"""Processes that die with their parent: a controller or agent killed outright
(SIGKILL, OOM) cannot clean up, so what it started must go by itself."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys

__all__ = ["as_user", "die_with_parent", "with_parent_death_signal"]

_PR_SET_PDEATHSIG = 1


def with_parent_death_signal(argv: list[str], signal_name: str = "KILL") -> list[str]:
    """``argv`` run so that it gets ``SIG<signal_name>`` when its parent dies:
    util-linux ``setpriv --pdeathsig`` sets the Linux parent-death signal and
    execs the program (same PID, no shell)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:  # not Linux/util-linux: the watchdog and stop still apply
        return argv
    return [setpriv, "--pdeathsig", signal_name, "--", *argv]


def as_user(argv: list[str], user: str) -> list[str]:
    """``argv`` run as ``user`` (its own group, no other) through util-linux
    ``setpriv``, which execs it: no fork in the caller's process after the
    switch, so a threaded caller (gRPC's fork handlers) is safe; a ``setpriv``
    already in front (``with_parent_death_signal``) takes the options."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise OSError(f"running {argv[0]} as {user} needs util-linux's setpriv")
    switch = [f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    if argv and argv[0] == setpriv:  # the death signal is kept across the switch
        return [setpriv, *switch, *argv[1:]]
    return [setpriv, *switch, "--", *argv]


def die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (PR_SET_PDEATHSIG),
    then check the parent did not die before that took effect."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
