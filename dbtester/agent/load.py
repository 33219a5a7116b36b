"""A load host's side of a spread load: the agent's ``Load`` call runs this
machine's share of the measured load on the native engine and streams back
its progress, then its records, then a summary.

The controller builds the engine's plan (its share of clients, connections,
requests and rate); the agent checks what it would dial (the database's
endpoints, HOST:PORT each) and the plan's size, and the engine checks the
rest. One load runs at a time. The records go to a file under the agent's
data root first and are streamed from there in chunks, so the agent holds
no more than the engine's own arrays. A cancelled call (the controller gone,
or another load host failed) stops the engine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from dbtester.config.model import ENDPOINT_PATTERN
from dbtester.load import native
from dbtester.load.client_metrics import ClientSampler
from dbtester.load.runner import ENGINE_THREADS, POLL_S, cpu_seconds, drain
from dbtester.proto import agent_pb2 as pb
from dbtester.util.net import endpoint_host
from dbtester.util.paths import SAFE_NAME
from dbtester.util.sched import SchedMeter

__all__ = ["LoadRefused", "LoadRunner", "Window", "checked_plan", "clock_shift_s"]

#: a plan is a few hundred bytes; anything this long is not one
MAX_PLAN_JSON = 64 * 1024
MAX_ENDPOINTS = 64
#: how far from now a start may be (seconds, either way)
START_WINDOW_S = 60.0
CHUNK = 1024 * 1024


class LoadRefused(Exception):  # noqa: N818 (a refusal, with the gRPC status to answer)
    """A Load request the agent will not run; ``status`` is a grpc.StatusCode name."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def clock_shift_s() -> float:
    """Seconds this agent adds to every time it reports. Always 0 in use:
    tests set ``DBTESTER_AGENT_CLOCK_SHIFT_S`` to give one agent a wrong
    clock, which the controller's offset measurement must correct (hosts in
    network namespaces share one clock)."""
    try:
        return float(os.environ.get("DBTESTER_AGENT_CLOCK_SHIFT_S", "0"))
    except ValueError:
        return 0.0


class LoadRunner:
    """The agent's one load at a time, under ``root``."""

    def __init__(
        self,
        root: Path,
        cores: int,
        targets: tuple[str, ...] | None = None,
        folder: str = "load",
    ) -> None:
        self.root = root
        #: its files' folder in a run's: one per agent, for agents that share
        #: a data root (two on one machine)
        self.folder = folder
        self.cores = cores
        #: the hosts a load may be sent to (None: any)
        self.targets = targets
        self._busy = threading.Lock()
        self._stop = threading.Event()
        self.shift_s = clock_shift_s()

    def stop(self) -> bool:
        """Ask the running load to stop early (its records still come back);
        False when none runs."""
        if not self._busy.locked():
            return False
        self._stop.set()
        return True

    def run(self, request: pb.LoadRequest, active: Callable[[], bool]) -> Iterator[pb.LoadReply]:
        """The replies of one Load call; LoadRefused before the first one when
        the request cannot run. ``active`` is False once the caller is gone."""
        plan = checked_plan(request, time.time() + self.shift_s, self.targets)
        if not self._busy.acquire(blocking=False):
            raise LoadRefused("RESOURCE_EXHAUSTED", "a load is already running on this agent")
        try:
            self._stop.clear()
            where = self.root / "runs" / request.run_id / request.database_id / self.folder
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir(parents=True, exist_ok=True)
            try:
                yield from self._run(request, plan, where, active)
            finally:  # sent, or abandoned: the controller keeps the records
                shutil.rmtree(where, ignore_errors=True)
        finally:
            self._busy.release()

    def _run(
        self, request: pb.LoadRequest, plan: Any, where: Path, active: Callable[[], bool]
    ) -> Iterator[pb.LoadReply]:
        if request.start_unix:
            # The engine connects first, then waits for the instant (on this
            # machine's real clock).
            plan["start_unix_ns"] = round((request.start_unix - self.shift_s) * 1e9)
        process = psutil.Process()
        cpu_before = cpu_seconds()
        window = Window(SchedMeter(ENGINE_THREADS), request.start_unix - self.shift_s)
        load = _start(plan)
        sampler = ClientSampler(
            process,
            where / "client-metrics.csv",
            plan["endpoints"],
            lambda: load.progress()[:2],
            clock=lambda: time.time() + self.shift_s,  # on the clock it reports
        )
        sampler.start()
        try:
            while not load.wait(window.poll_s()):
                window.sample()
                if not active():
                    load.stop()
                    drain(load)
                    return
                if self._stop.is_set():
                    load.stop()
                done, errors, _ = load.progress()
                yield pb.LoadReply(progress=pb.LoadProgress(done=done, errors=errors))
        finally:
            sampler.stop()
            if not load.wait(0):
                load.stop()
                drain(load)
        ended = time.time()
        window.sample()
        done, errors, _ = load.progress()
        yield pb.LoadReply(progress=pb.LoadProgress(done=done, errors=errors))
        error = self._save(load, where)
        for name, path in (
            ("requests", where / "requests.npz"),
            ("check", where / "check.npz"),
            ("client", where / "client-metrics.csv"),
        ):
            if path.exists():
                yield from _chunks(name, path)
        waited, ran = window.wait_seconds, window.run_seconds
        yield pb.LoadReply(
            summary=pb.LoadSummary(
                started_unix=window.since + self.shift_s,
                ended_unix=ended + self.shift_s,
                cpu_seconds=cpu_seconds() - cpu_before,
                engine_cpu_seconds=-1.0 if ran is None else ran,
                cpu_wait_seconds=-1.0 if waited is None else waited,
                workers=int(plan["threads"]),
                cores=self.cores,
                error=error,
            )
        )

    def _save(self, load: Any, where: Path) -> str:
        """The engine's records (and checked operations) into ``where``, on
        this agent's reported clock; why the engine failed ("" when it did not)."""
        try:
            result = load.result()
        except RuntimeError as exc:
            return f"the load engine failed: {exc}"
        shift_ns = round(self.shift_s * 1e9)
        native.records_of(result).moved(shift_ns).save(where / "requests.npz")
        check = native.checked_operations_of(result)
        if check is not None:
            check.moved(shift_ns).save(where / "check.npz")
        return ""


class Window:
    """The engine threads' CPU over the load itself: from the common start
    to the end. An engine connects first, then sleeps until that instant;
    counting the sleep would make an engine short of CPU look half idle
    (a 3-s load at its limit read 83% busy instead of 97%)."""

    def __init__(self, sched: SchedMeter, begin: float) -> None:
        self.sched, self.begin = sched, begin
        sched.sample()
        #: when the window opened (unix seconds, this machine's clock)
        self.since = time.time()
        self._open = begin <= self.since  # no common start ahead: from now
        self._base = (0, 0)  # run and wait ns already counted when it opened

    def poll_s(self) -> float:
        """How long the next poll may wait: not past the common start, so
        the window opens on it."""
        if self._open:
            return POLL_S
        return min(POLL_S, max(0.0, self.begin - time.time()))

    def sample(self) -> None:
        self.sched.sample()
        if not self._open and time.time() >= self.begin:
            self._open, self.since = True, time.time()
            self._base = (self.sched.run_ns, self.sched.wait_ns)

    @property
    def run_seconds(self) -> float | None:
        run = self.sched.run_seconds
        return None if run is None else run - self._base[0] / 1e9

    @property
    def wait_seconds(self) -> float | None:
        wait = self.sched.wait_seconds
        return None if wait is None else wait - self._base[1] / 1e9


def _chunks(name: str, path: Path) -> Iterator[pb.LoadReply]:
    offset = 0
    with path.open("rb") as handle:
        while data := handle.read(CHUNK):
            yield pb.LoadReply(file=pb.LoadFile(name=name, data=data, offset=offset))
            offset += len(data)


def checked_plan(
    request: pb.LoadRequest, now: float, targets: tuple[str, ...] | None = None
) -> Any:
    """The request's plan, once what the agent itself must vouch for is
    checked: names, size, start time and the endpoints it would dial (on
    ``targets`` only, unless that is None)."""
    for field in ("run_id", "database_id"):
        value = getattr(request, field)
        if not SAFE_NAME.fullmatch(value):
            raise LoadRefused(
                "INVALID_ARGUMENT", f"{field} {value[:80]!r} must be letters, digits, . _ -"
            )
    if len(request.plan_json) > MAX_PLAN_JSON:
        raise LoadRefused(
            "INVALID_ARGUMENT", f"{len(request.plan_json):,} characters of JSON is not a plan"
        )
    if request.start_unix and not abs(request.start_unix - now) <= START_WINDOW_S:
        raise LoadRefused(
            "INVALID_ARGUMENT",
            f"start_unix {request.start_unix!r} is not within {START_WINDOW_S:g} s of this"
            f" agent's clock ({now:.3f})",
        )
    try:
        plan = json.loads(request.plan_json)
    except (ValueError, RecursionError) as exc:
        raise LoadRefused("INVALID_ARGUMENT", f"the plan is not JSON: {str(exc)[:200]}") from None
    if not isinstance(plan, dict):
        raise LoadRefused("INVALID_ARGUMENT", "the plan must be a JSON object")
    endpoints = plan.get("endpoints")
    if (
        not isinstance(endpoints, list)
        or not 1 <= len(endpoints) <= MAX_ENDPOINTS
        or not all(isinstance(e, str) and re.fullmatch(ENDPOINT_PATTERN, e) for e in endpoints)
    ):
        raise LoadRefused(
            "INVALID_ARGUMENT",
            f"the plan's endpoints must be 1 to {MAX_ENDPOINTS} HOST:PORT strings",
        )
    if targets is not None:
        strangers = [e for e in endpoints if endpoint_host(e) not in targets]
        if strangers:
            allowed = ", ".join(targets) or "none"
            raise LoadRefused(
                "PERMISSION_DENIED",
                f"endpoint {strangers[0][:100]!r} is not on a database of the test case this"
                f" agent was brought up for (its hosts: {allowed}); run `dbtester agents up`"
                " with the test case",
            )
    plan.pop("start_unix_ns", None)  # the request's start_unix, checked above, sets it
    if not isinstance(plan.get("threads"), int) or not 1 <= plan["threads"] <= 64:
        raise LoadRefused("INVALID_ARGUMENT", "the plan's threads must be 1 to 64")
    return plan


def _start(plan: Any) -> Any:
    try:
        from dbtester import _engine
    except ImportError as exc:
        raise LoadRefused("FAILED_PRECONDITION", f"this agent has no load engine: {exc}") from None
    try:
        return _engine.start(plan)
    except ValueError as exc:
        raise LoadRefused("INVALID_ARGUMENT", f"the engine refused the plan: {exc}") from None
    except MemoryError as exc:
        raise LoadRefused("RESOURCE_EXHAUSTED", f"not enough memory for this load: {exc}") from None
    except TypeError as exc:
        raise LoadRefused("INVALID_ARGUMENT", f"the engine refused the plan: {exc}") from None
