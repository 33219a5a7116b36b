"""A member's slow-disk layer: ``dbtester-slowfs`` (a FUSE passthrough, see
agent/slowfs/) mounted on the member's data directory before the member
starts, with no delay; a ``slow_disk`` fault sets its fsync delay and
``restore_disk`` clears it.

Mounting it before the start matters: a layer mounted mid-run would not reach
the files the member already holds open. The files live beside the mount
point, in ``data.disk/``; unmounting puts them back at ``data/``, so a stop
measures, archives or removes the data directory as it does without a layer.

The program unmounts itself at the end of its stdin, so the layer ends with
its agent even when the agent is killed outright; :meth:`DiskLayer.close`
unmounts it and checks that nothing is left mounted.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import subprocess
from pathlib import Path

from dbtester.errors import MemberError
from dbtester.install import Installed

__all__ = ["MAX_FSYNC_MS", "NO_LAYER", "DiskLayer", "mounted"]

#: how long the layer may take to mount, answer, or unmount and exit
_REPLY_S = 10.0
#: the largest delay the program accepts (a minute per fsync stalls anything)
MAX_FSYNC_MS = 60_000.0
_MNT_DETACH = 2
NO_LAYER = (
    "this member has no slow-disk layer: it is mounted at the start of a test case"
    " whose faults include slow_disk"
)


def mounted(path: Path) -> bool:
    """Whether ``path`` is a mount point in this mount namespace."""
    # the parent resolved, not the path: a mount whose server died answers
    # every stat of it with ENOTCONN
    target = str(path.parent.resolve() / path.name)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    # mountinfo's fifth field is the mount point, with spaces as \040
    return any(line.split()[4].replace("\\040", " ") == target for line in lines if line)


class DiskLayer:
    """The layer under one member's ``data_dir``; ``installed`` is the
    program (``dbtester.slowdisk``)."""

    def __init__(self, installed: Installed, data_dir: Path, log: logging.Logger) -> None:
        self.binary = installed.path("dbtester-slowfs")
        self.data_dir = data_dir
        self.backing = data_dir.with_name(data_dir.name + ".disk")
        self.log = log
        self.fsync_ms = 0.0
        self._process: subprocess.Popen[str] | None = None

    @property
    def active(self) -> bool:
        return self._process is not None

    def open(self) -> None:
        """Mount the layer (no delay) on the empty data directory."""
        self.backing.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.data_dir.parent / "slowfs.log"
        with log_path.open("a") as errors:
            try:
                self._process = subprocess.Popen(
                    [str(self.binary), str(self.backing), str(self.data_dir)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    text=True,
                    # not in the terminal's group: a Ctrl-C reaches the agent,
                    # which stops the member first and then the layer
                    start_new_session=True,
                )
            except OSError as exc:
                raise MemberError(f"cannot run {self.binary}: {exc.strerror}") from None
        line = self._reply()
        if line != "mounted":
            self._end()
            said = log_path.read_text()[-500:].strip() or line or "no answer"
            raise MemberError(
                f"the slow-disk layer did not mount on {self.data_dir}: {said}"
                " (it needs /dev/fuse and an agent running as root)"
            )
        self.log.info("slow-disk layer mounted on %s (files in %s)", self.data_dir, self.backing)

    def set_fsync_ms(self, fsync_ms: float) -> None:
        """Every fsync and fdatasync in the data directory waits this much longer."""
        if self._process is None or self._process.stdin is None:
            raise MemberError(NO_LAYER)
        if not 0 <= fsync_ms <= MAX_FSYNC_MS:
            raise MemberError(f"fsync_ms is 0 to {MAX_FSYNC_MS:g}, not {fsync_ms:g}")
        try:
            self._process.stdin.write(f"fsync_ms {fsync_ms:g}\n")
            self._process.stdin.flush()
        except OSError as exc:
            raise MemberError(f"the slow-disk layer is gone: {exc}") from None
        line = self._reply()
        if line != "ok":
            raise MemberError(f"the slow-disk layer refused fsync_ms {fsync_ms:g}: {line}")
        self.fsync_ms = fsync_ms
        self.log.info("slow-disk layer: fsync takes %g ms longer", fsync_ms)

    def close(self) -> None:
        """Unmount (after the member stopped) and put the files back under the
        data directory; MemberError if the mount outlived the program."""
        if self._process is None:
            return
        self._end()
        if mounted(self.data_dir):
            # the program died without unmounting: detach it, so no stale
            # mount outlives the run
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.umount2(str(self.data_dir).encode(), _MNT_DETACH) != 0:
                error = os.strerror(ctypes.get_errno())
                raise MemberError(f"the slow-disk layer on {self.data_dir} stays mounted: {error}")
        with contextlib.suppress(OSError):
            self.data_dir.rmdir()  # the empty mount point
        if self.backing.exists() and not self.data_dir.exists():
            self.backing.rename(self.data_dir)
        self.log.info("slow-disk layer unmounted from %s", self.data_dir)

    def close_quietly(self) -> str:
        """:meth:`close`, its failure logged and returned ("" when none), so
        a stop goes on."""
        try:
            self.close()
        except MemberError as exc:
            self.log.error("%s", exc)
            return str(exc)
        return ""

    def _end(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()  # the program unmounts and exits
        try:
            process.wait(_REPLY_S)
        except subprocess.TimeoutExpired:
            process.kill()  # by PID: it is our child
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def _reply(self) -> str:
        """The program's next line, waited for at most _REPLY_S."""
        assert self._process is not None and self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], _REPLY_S)
        return self._process.stdout.readline().strip() if ready else ""
