"""One load-generator worker process: an asyncio loop driving its share of the
clients, recording every request into preallocated arrays.

Closed loop: each client issues its next request when the previous one
returns; latency runs from issue to reply. Open loop (a target rate): request
``j`` of a step is due at ``step_start + j / rate`` whatever happened before;
latency runs from that due time, so a server that falls behind shows its
queue instead of hiding it (no coordinated omission). At most ``clients``
requests are in flight; a request waiting for a free client is still timed
from its due time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path
from typing import Any

from dbtester.databases import get_kind
from dbtester.databases.base import LoadClient, LoadSettings
from dbtester.results import Records
from dbtester.util.keys import KeySpace
from dbtester.util.procs import die_with_parent

__all__ = ["Shared", "StepShare", "WorkerSpec", "interleave", "run_worker", "split"]

PROGRESS_EVERY = 64  # requests between updates of the shared progress counters


@dataclass(frozen=True)
class StepShare:
    """This worker's part of one client step."""

    clients: int
    connections: int
    indexes: range  # global request numbers (into the key space) this worker sends
    rate: float  # this worker's requests/s; 0 = closed loop
    phase_s: float  # open loop: offset of this worker's first request in the step


@dataclass(frozen=True)
class WorkerSpec:
    index: int
    kind: str
    settings: LoadSettings
    workload_type: str  # write | read
    requests: int  # the whole run's (sizes the key space)
    sequential_keys: bool
    steps: tuple[StepShare, ...]
    out: Path
    seed: int
    parent_pid: int = field(default_factory=os.getpid)  # made in the controller


@dataclass
class Shared:
    """What workers share with the controller (all lock-free, one writer each)."""

    # multiprocessing arrays (typed loosely: their stubs do not fit lock=False arrays)
    done: Any  # requests finished, per worker
    errors: Any  # requests failed, per worker
    cpu_s: Any  # CPU seconds each worker used
    stop: Event  # set by the controller: error limit passed or Ctrl-C
    barrier: Barrier  # step boundaries: all connected before a step starts


def run_worker(spec: WorkerSpec, shared: Shared) -> None:
    """Process entry point. A failure is written beside the records for the
    controller to report, and the process exits non-zero."""
    # Ctrl-C reaches the whole process group; the controller decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Orphaned workers of a controller killed outright would go on loading the
    # database.
    die_with_parent(spec.parent_pid)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # uvloop is optional; plain asyncio works, a little slower
        pass
    try:
        asyncio.run(_Worker(spec, shared).run())
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        spec.out.with_suffix(".error").write_text(reason)
        raise SystemExit(1) from None


class _Worker:
    def __init__(self, spec: WorkerSpec, shared: Shared) -> None:
        self.spec = spec
        self.shared = shared
        self.read = spec.workload_type == "read"
        # A read workload reads the one seeded key, request after request.
        self.keys = KeySpace(
            spec.requests,
            spec.settings.key_size,
            sequential=spec.sequential_keys,
            same_key=spec.settings.same_key or self.read,
            seed=spec.seed,
        )
        size = sum(len(s.indexes) for s in spec.steps)
        self.records = Records.empty(size)
        self.n = 0  # records filled
        self.cpu_baseline = 0.0  # set when the first step starts: imports are not load
        self.stopping = False
        self.errors = 0
        # Wall-clock anchor: perf_counter_ns is monotonic and fine-grained, time_ns
        # is what other machines' samples are aligned on.
        self.anchor_wall = time.time_ns()
        self.anchor_perf = time.perf_counter_ns()

    async def run(self) -> None:
        client = get_kind(self.spec.kind).load_client(self.spec.settings)
        try:
            for number, step in enumerate(self.spec.steps):
                await self._step(client, number, step)
        finally:
            self._publish()
            self.records.truncate(self.n).save(self.spec.out)
            with contextlib.suppress(Exception):
                await client.close()

    async def _step(self, client: LoadClient, number: int, step: StepShare) -> None:
        active = step.clients > 0 and not self.shared.stop.is_set()
        if active:
            await client.open(step.connections)
        # Everyone connected: start together (barrier release skew is well under 1 ms).
        await asyncio.get_running_loop().run_in_executor(None, self.shared.barrier.wait)
        if number == 0:
            self.cpu_baseline = _cpu_seconds()
        if active and not self.shared.stop.is_set():
            if step.rate > 0:
                await self._open_loop(client, number, step)
            else:
                await self._closed_loop(client, number, step)
        self._publish()
        await client.close()
        await asyncio.get_running_loop().run_in_executor(None, self.shared.barrier.wait)

    # ------------------------------------------------------------------ loops

    async def _closed_loop(self, client: LoadClient, number: int, step: StepShare) -> None:
        todo = iter(step.indexes)

        async def one_client(slot: int) -> None:
            conn = slot % step.connections
            for index in todo:
                if self.stopping:
                    return
                started = time.perf_counter_ns()
                await self._send(client, conn, index, number, started, started)

        await asyncio.gather(*(one_client(c) for c in range(step.clients)))

    async def _open_loop(self, client: LoadClient, number: int, step: StepShare) -> None:
        free = asyncio.Semaphore(step.clients)
        begin = time.perf_counter_ns() + int(step.phase_s * 1e9)
        period = 1e9 / step.rate
        tasks: set[asyncio.Task[None]] = set()

        async def fire(index: int, due: int, conn: int) -> None:
            try:
                await self._send(client, conn, index, number, due, time.perf_counter_ns())
            finally:
                free.release()

        for k, index in enumerate(step.indexes):
            if self.stopping:
                break
            due = begin + int(k * period)
            wait = due - time.perf_counter_ns()
            if wait > 0:
                await asyncio.sleep(wait / 1e9)
            # Event-loop timers may fire up to a clock tick early: never send early.
            while time.perf_counter_ns() < due:
                await asyncio.sleep(0)
            await free.acquire()  # all clients busy: the wait counts as latency
            task = asyncio.create_task(fire(index, due, k % step.connections))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)

    async def _send(
        self, client: LoadClient, conn: int, index: int, step: int, due: int, sent: int
    ) -> None:
        key = self.keys.key(index)
        code = 0
        try:
            if self.read:
                await client.read(conn, key)
            else:
                await client.write(conn, key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every failure is an outcome to count, never a crash
            code = self.records.code_of(client.outcome(exc))
            self.errors += 1
        end = time.perf_counter_ns()
        i = self.n
        r = self.records
        r.due_ns[i] = self.anchor_wall + (due - self.anchor_perf)
        r.latency_ns[i] = end - due
        r.service_ns[i] = end - sent
        r.code[i] = code
        r.step[i] = step
        self.n = i + 1
        if self.n % PROGRESS_EVERY == 0:
            self._publish()

    def _publish(self) -> None:
        # The stop event is a semaphore-backed lock: read it here, not per request.
        self.stopping = self.shared.stop.is_set()
        self.shared.done[self.spec.index] = self.n
        self.shared.errors[self.spec.index] = self.errors
        self.shared.cpu_s[self.spec.index] = _cpu_seconds() - self.cpu_baseline


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def split(total: int, parts: int) -> list[int]:
    """``total`` shared as evenly as possible over ``parts`` (earlier parts larger)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def interleave(indexes: Sequence[int], part: int, parts: int) -> range:
    """Every ``parts``-th of a contiguous range, starting at ``part``."""
    assert isinstance(indexes, range) and indexes.step == 1
    return range(indexes.start + part, indexes.stop, parts)
