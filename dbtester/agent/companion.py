"""A member's companion server (kine's PostgreSQL): made in the member's data
folder, started before the member, sampled on its own, stopped after it.

A companion that refuses to run as root (PostgreSQL does) runs, when the
agent is root, as :data:`USER`, a system user the agent makes once. That
user cannot reach a data folder under root's home (``/root`` is 0700), so
its folder is also bind-mounted at a path it can reach, under
:data:`MOUNT_ROOT`, for the companion's life: the data stays in the member's
folder, measured, archived and removed with it.
Its files there::

    member-<i>/<name>.log           its stdout and stderr (setup commands' too)
    member-<i>/<name>-metrics.csv   one sample per second, as metrics.csv
    member-<i>/data/<folder>/       its data
"""

from __future__ import annotations

import logging
import os
import pwd
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from dbtester.agent.process_group import (
    in_state,
    log_tail,
    signal_group,
    spawn_group,
    terminate_group,
)
from dbtester.agent.sampler import Sampler
from dbtester.databases.base import COMPANION_DATA, Companion, MemberSpec
from dbtester.errors import MemberError
from dbtester.util.net import tcp_open
from dbtester.util.procs import as_user

__all__ = ["MOUNT_ROOT", "USER", "CompanionProcess"]

#: the unprivileged user a root agent runs such companions as
USER = "dbtester-db"
#: where a root agent bind-mounts their folders (searchable by all, listable by root)
MOUNT_ROOT = Path("/run/dbtester-companions")
#: how long a companion may take to accept connections (PostgreSQL: about 1 s)
READY_S = 60.0
#: how long a setup command may take (initdb: about 1 s)
SETUP_S = 120.0


class CompanionProcess:
    """One companion server of one member; its methods run under the member's lock."""

    def __init__(
        self,
        plan: Companion,
        member: MemberSpec,
        log: logging.Logger,
        sampler_settings: Mapping[str, Any],
    ) -> None:
        self.plan = plan
        self.folder = member.data_dir / plan.folder
        self.log_path = member.member_dir / f"{plan.name}.log"
        self.metrics_path = member.member_dir / f"{plan.name}-metrics.csv"
        self.log = log
        self.sampler_settings = sampler_settings
        self.process: subprocess.Popen[bytes] | None = None
        self.sampler: Sampler | None = None
        self.user: pwd.struct_passwd | None = None
        self.mount: Path | None = None
        self.state = "new"

    @property
    def file_names(self) -> tuple[str, ...]:
        """Its files in the member's folder, for the controller to fetch."""
        return self.log_path.name, self.metrics_path.name

    @property
    def path(self) -> Path:
        """Its data folder as it sees it (the bind mount when there is one)."""
        return self.mount or self.folder

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        """Make its folder, set it up, start it and wait until it serves;
        MemberError (with its log's tail) when any step fails."""
        if self.plan.unprivileged and os.geteuid() == 0:
            self.user = _unprivileged_user()
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=False)
        if self.user is not None:
            os.chown(self.folder, self.user.pw_uid, self.user.pw_gid)
            self.mount = _bind_mount(self.folder, self.user)
            self.log.info("%s runs as %s on %s, mounted at %s", *self._who())
        for argv in self.plan.setup:
            self._setup(argv)
        for name, text in self.plan.files.items():
            target = self.path / name
            target.write_text(text)
            if self.user is not None:
                os.chown(target, self.user.pw_uid, self.user.pw_gid)
        self._launch()

    def _who(self) -> tuple[str, str, Path, Path | None]:
        user = self.user.pw_name if self.user else "the agent's user"
        return self.plan.name, user, self.folder, self.mount

    def _argv(self, argv: list[str]) -> list[str]:
        return [part.replace(COMPANION_DATA, str(self.path)) for part in argv]

    def _setup(self, argv: list[str]) -> None:
        resolved = self._argv(argv)
        self.log.info("%s setup: %s", self.plan.name, " ".join(resolved))
        with self.log_path.open("ab") as out:
            try:
                command = as_user(resolved, self.user.pw_name) if self.user else resolved
                done = subprocess.run(
                    command,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.path,
                    timeout=SETUP_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise MemberError(f"{self.plan.name}'s setup {resolved[0]} failed: {exc}") from None
        if done.returncode != 0:
            raise MemberError(
                f"{self.plan.name}'s setup {Path(resolved[0]).name} exited with code"
                f" {done.returncode}; log tail:\n{log_tail(self.log_path, 10)}"
            )

    def _launch(self) -> None:
        argv = self._argv(self.plan.argv)
        self.log.info("starting %s: %s", self.plan.name, " ".join(argv))
        user = self.user.pw_name if self.user else None
        self.process = spawn_group(argv, {}, self.path, self.log_path, user)
        self._await_ready()
        self.state = "running"
        self.sampler = Sampler(
            psutil.Process(self.process.pid),
            self.metrics_path,
            self.folder,
            **self.sampler_settings,
            proportional=True,  # forked processes sharing memory: each page once
        )
        self.sampler.start()
        self.log.info("%s serves as pid %d", self.plan.name, self.process.pid)

    def _await_ready(self) -> None:
        assert self.process is not None
        host, port = self.plan.ready
        deadline = time.monotonic() + READY_S
        while not tcp_open(host, port, 0.5):
            code = self.process.poll()
            if code is not None:
                self.state = "exited"
                raise MemberError(
                    f"{self.plan.name} exited with code {code} at start; log tail:\n"
                    f"{log_tail(self.log_path, 10)}"
                )
            if time.monotonic() > deadline:
                raise MemberError(
                    f"{self.plan.name} did not accept connections on {host}:{port} within"
                    f" {READY_S:.0f} s; log tail:\n{log_tail(self.log_path, 10)}"
                )
            time.sleep(0.1)

    # ------------------------------------------------------------------ faults

    def kill(self) -> None:
        process = self._expect("kill", ("running", "paused"))
        signal_group(process, signal.SIGKILL)
        process.wait()
        self.state = "killed"
        self.log.info(
            "%s killed (scheduled fault): SIGKILL to group %d", self.plan.name, process.pid
        )

    def restart(self) -> None:
        self._expect("restart", ("killed",))
        if self.sampler is not None:
            self.sampler.stop(final_sample=False)
        self._launch()

    def pause(self) -> None:
        signal_group(self._expect("pause", ("running",)), signal.SIGSTOP)
        self.state = "paused"

    def resume(self) -> None:
        signal_group(self._expect("resume", ("paused",)), signal.SIGCONT)
        self.state = "running"

    def _expect(self, action: str, states: tuple[str, ...]) -> subprocess.Popen[bytes]:
        return in_state(self.process, self.state, states, action, self.plan.name)

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    # ------------------------------------------------------------------ stop

    def stop(self, grace: float) -> None:
        """Stop it (SIGTERM, then SIGKILL after ``grace``) and undo its mount;
        quiet about what is gone already."""
        if self.sampler is not None:
            self.sampler.stop(final_sample=self.state == "running")
            self.sampler = None
        if self.state == "paused" and self.process is not None:
            signal_group(self.process, signal.SIGCONT)  # a stopped process ignores SIGTERM
        terminate_group(self.process, grace, self.log)
        self.state = "stopped"
        if self.mount is not None:
            _unmount(self.mount, self.log)
            self.log.info("%s stopped; %s unmounted", self.plan.name, self.mount)
            self.mount = None


def _unprivileged_user() -> pwd.struct_passwd:
    """:data:`USER`, made the first time (a system user, no home, no shell)."""
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pass
    made = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        raise MemberError(
            f"cannot make the user {USER} to run the database as (it refuses root):"
            f" useradd said {made.stderr.strip() or made.returncode}"
        ) from None


def _bind_mount(folder: Path, user: pwd.struct_passwd) -> Path:
    """``folder`` bind-mounted at a new path under :data:`MOUNT_ROOT`."""
    MOUNT_ROOT.mkdir(mode=0o711, exist_ok=True)
    os.chmod(MOUNT_ROOT, 0o711)  # others may pass through, not list
    point = Path(tempfile.mkdtemp(prefix="companion-", dir=MOUNT_ROOT))
    os.chown(point, user.pw_uid, user.pw_gid)
    done = subprocess.run(
        ["mount", "--bind", str(folder), str(point)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        point.rmdir()
        raise MemberError(
            f"cannot bind-mount {folder} at {point} for {user.pw_name}: {done.stderr.strip()}"
        )
    return point


def _unmount(point: Path, log: logging.Logger) -> None:
    done = subprocess.run(["umount", str(point)], capture_output=True, text=True, check=False)
    if done.returncode != 0:  # still busy: detached now, gone when its last user is
        log.warning("umount %s: %s; detaching it lazily", point, done.stderr.strip())
        subprocess.run(["umount", "--lazy", str(point)], capture_output=True, check=False)
    try:
        point.rmdir()
    except OSError as exc:
        log.warning("cannot remove %s: %s", point, exc.strerror)
