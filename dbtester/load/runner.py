"""The controller's side of the load generator: plan the steps, start the
worker processes, show progress, enforce the error limit, merge the records.

Workers are separate processes (``spawn``: the controller holds gRPC channels,
which must not be forked), each with its share of clients, connections and
requests, so the client side uses every core.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import psutil

from dbtester.config.model import Workload
from dbtester.databases.base import LoadSettings
from dbtester.errors import DbtesterError
from dbtester.load.client_metrics import ClientSampler
from dbtester.load.worker import Shared, StepShare, WorkerSpec, interleave, run_worker, split
from dbtester.results import DatabaseLayout, Records
from dbtester.util.progress import Progress

__all__ = ["LoadResult", "plan_steps", "run_load"]


@dataclass(frozen=True)
class LoadResult:
    records: Records
    started_unix: float
    ended_unix: float
    cpu_seconds: float  # all workers, user + system
    aborted: str  # why the run stopped early ("" if it did not)
    workers: int

    @property
    def ok(self) -> int:
        return int((self.records.code == 0).sum())

    @property
    def errors(self) -> int:
        return len(self.records) - self.ok


def plan_steps(workload: Workload, workers: int) -> list[list[StepShare]]:
    """For each worker, its share of every step (clients, connections, requests)."""
    shares: list[list[StepShare]] = [[] for _ in range(workers)]
    offset = 0
    for clients, connections, requests in workload.step_plan():
        # Never more workers than clients or connections: each active worker holds
        # at least one of each, so more would exceed what the test case asked for.
        active = min(workers, clients, connections)
        client_split = split(clients, active)
        conn_split = split(connections, active)
        step_range = range(offset, offset + requests)
        offset += requests
        rate = workload.rate / active if workload.rate else 0.0
        for w in range(workers):
            if w >= active:
                shares[w].append(StepShare(0, 0, range(0), 0.0, 0.0))
                continue
            shares[w].append(
                StepShare(
                    clients=client_split[w],
                    connections=max(1, min(conn_split[w], client_split[w])),
                    indexes=interleave(step_range, w, active),
                    rate=rate,
                    phase_s=w / workload.rate if workload.rate else 0.0,
                )
            )
    return shares


def run_load(
    kind: str,
    settings: LoadSettings,
    workload: Workload,
    out: DatabaseLayout,
    *,
    workers: int | None = None,
    max_error_rate: float = 1.0,
    progress: TextIO | None = sys.stderr,
    label: str = "",
    seed: int = 1,
    health: Callable[[], str] | None = None,
) -> LoadResult:
    """Drive ``workload`` against ``settings.endpoints``; save the merged records
    and the client sampler's CSV into ``out``.

    ``health`` is polled four times a second; a non-empty answer (e.g. "agent
    10.0.0.2:3500 stopped answering") stops the load and becomes ``aborted``."""
    count = workers or os.cpu_count() or 1
    out.root.mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("spawn")
    shared = Shared(
        done=context.Array("q", count, lock=False),
        errors=context.Array("q", count, lock=False),
        cpu_s=context.Array("d", count, lock=False),
        stop=context.Event(),
        barrier=context.Barrier(count),
    )
    shares = plan_steps(workload, count)
    parts = [out.worker_part(w) for w in range(count)]
    specs = [
        WorkerSpec(
            w,
            kind,
            settings,
            workload.type,
            workload.requests,
            workload.sequential_keys,
            tuple(shares[w]),
            parts[w],
            seed,
        )
        for w in range(count)
    ]
    processes = [
        context.Process(
            target=run_worker, args=(spec, shared), name=f"load-{spec.index}", daemon=True
        )
        for spec in specs
    ]
    started = time.time()
    for process in processes:
        process.start()
    sampler = ClientSampler(
        [psutil.Process(p.pid) for p in processes if p.pid],
        out.client_metrics,
        settings.endpoints,
        shared,
    )
    sampler.start()
    limit = max_error_rate * workload.requests
    aborted = ""
    try:
        aborted = _watch(processes, shared, workload.requests, limit, progress, label, health)
    except KeyboardInterrupt:
        shared.stop.set()  # workers finish what is in flight and save their records
        raise
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():  # never leave a worker behind
                process.kill()
                process.join()
        sampler.stop()
        # Whatever happened, the requests that were made are kept.
        records = _collect(parts, out.requests)
    ended = time.time()
    failed = [p.name for p in processes if p.exitcode not in (0, None)]
    reasons = sorted(
        {p.with_suffix(".error").read_text() for p in parts if p.with_suffix(".error").exists()}
    )
    for part in parts:
        part.with_suffix(".error").unlink(missing_ok=True)
    if failed or reasons:
        why = "; ".join(reasons) or f"exit codes {[p.exitcode for p in processes]}"
        raise DbtesterError(f"load generator failed ({', '.join(failed) or '?'}): {why}")
    return LoadResult(records, started, ended, float(sum(shared.cpu_s)), aborted, count)


def _collect(parts: Sequence[Path], target: Path) -> Records:
    """Merge the workers' records into ``target`` (the parts are removed)."""
    records = Records.merge([Records.load(p) for p in parts if p.exists()])
    records.save(target)
    for part in parts:
        part.unlink(missing_ok=True)
    return records


def _watch(
    processes: Sequence[multiprocessing.process.BaseProcess],
    shared: Shared,
    total: int,
    limit: float,
    stream: TextIO | None,
    label: str,
    health: Callable[[], str] | None = None,
) -> str:
    """Progress until the workers finish; sets the stop event past the error limit."""
    bar = Progress(stream, total, label)
    aborted = ""
    while any(p.is_alive() for p in processes):
        time.sleep(0.25)
        done, errors = sum(shared.done), sum(shared.errors)
        if errors > limit and not aborted:
            aborted = f"{errors:,} errors passed the limit of {limit:,.0f}"
            shared.stop.set()
        problem = health() if health is not None and not aborted else ""
        if problem:
            aborted = problem
            shared.stop.set()
        bar.update(done, _describe(done, total, errors))
        if any(p.exitcode not in (None, 0) for p in processes):
            shared.stop.set()  # one worker died: stop the rest rather than wait
            with contextlib.suppress(Exception):
                shared.barrier.abort()
    done, errors = sum(shared.done), sum(shared.errors)
    seconds = bar.elapsed
    bar.finish(
        f"{label + ' ' if label else ''}{done:,} requests in {seconds:.1f} s"
        f" ({done / max(seconds, 1e-9):,.0f} req/s), {errors:,} errors"
    )
    return aborted


def _describe(done: int, total: int, errors: int) -> Callable[[float], str]:
    return lambda rate: f"{done:,}/{total:,}  {rate:,.0f} req/s  errors {errors:,}"
