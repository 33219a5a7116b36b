"""The measured load shared among the test case's ``load_hosts``: each host's
agent runs its share on its own engine, all starting at one instant, and
their records come back to be merged into one set.

The controller picks a start a little ahead, tells each agent that instant on
the agent's own clock (its measured offset added), follows their progress
streams as one progress bar, and stops them all when the load must stop
early (errors, a stall, a server agent gone): stopped hosts still send what
they recorded. A load host that fails or falls silent for
:data:`SILENT_S` fails the run, naming it; the other hosts' calls are
cancelled, which stops their engines.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from dbtester.agent.client import AgentClient, ClockOffset
from dbtester.analyze.probes import CLIENT_BUSY
from dbtester.config.model import Workload
from dbtester.databases.base import LoadSettings
from dbtester.errors import AgentError, DbtesterError
from dbtester.load import native
from dbtester.load.runner import (
    POLL_S,
    EarlyStop,
    LoadOptions,
    LoadResult,
    describe,
    error_limit,
    load_summary,
)
from dbtester.load.shares import Share, merge, split
from dbtester.proto import agent_pb2 as pb
from dbtester.results import CheckedOperations, DatabaseLayout, LoadHostRecord, Records
from dbtester.util.progress import Progress

__all__ = [
    "SILENT_S",
    "START_AHEAD_S",
    "LoadHosts",
    "SpreadLoad",
    "at_cpu_limit",
    "run_spread",
]

#: how far ahead of now the hosts are told to start: time for every Load
#: call to reach its agent
START_AHEAD_S = 1.0
#: a load host whose stream said nothing for this long has failed (three
#: heartbeats and a second: it sends progress four times a second)
SILENT_S = 4.0
#: how long stopped hosts may take to send their records
COLLECT_S = 60.0


@dataclass
class _Host:
    """One load host's call, followed on a thread of its own."""

    index: int
    client: AgentClient
    offset: ClockOffset
    share: Share
    folder: Path
    call: Any = None
    done: int = 0
    errors: int = 0
    heard: float = field(default_factory=time.monotonic)
    summary: pb.LoadSummary | None = None
    failure: str = ""
    finished: threading.Event = field(default_factory=threading.Event)

    def follow(self) -> None:
        files: dict[str, Any] = {}
        try:
            for reply in self.call:
                self.heard = time.monotonic()
                part = reply.WhichOneof("part")
                if part == "progress":
                    self.done, self.errors = reply.progress.done, reply.progress.errors
                elif part == "file":
                    name = reply.file.name
                    if name not in files:
                        files[name] = self.path(name).open("wb")
                    files[name].write(reply.file.data)
                elif part == "summary":
                    self.summary = reply.summary
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.failure = str(self.client.failed(exc))
        except OSError as exc:
            self.failure = f"saving its records: {exc}"
        finally:
            for handle in files.values():
                handle.close()
            if self.summary is None and not self.failure:
                self.failure = f"{self.client.address}: its load ended without a summary"
            self.finished.set()

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.part"


@dataclass(frozen=True)
class LoadHosts:
    """The agents that share a measured load, their clocks' offsets from
    ours, and the run and database their agents know the load by."""

    clients: tuple[AgentClient, ...]
    offsets: tuple[ClockOffset, ...]
    run_id: str
    database_id: str


@dataclass(frozen=True)
class SpreadLoad:
    """A spread load's merged result and each host's part in it."""

    result: LoadResult
    hosts: tuple[LoadHostRecord, ...]


def run_spread(
    kind: str,
    settings: LoadSettings,
    workload: Workload,
    out: DatabaseLayout,
    load_hosts: LoadHosts,
    options: LoadOptions,
) -> SpreadLoad:
    """Run ``workload`` from ``load_hosts`` against ``settings.endpoints`` as
    ``options`` say; save the merged records into ``out``. As
    :func:`~dbtester.load.runner.run_load`, with ``aborted`` saying why the
    load stopped early; DbtesterError naming the load host that failed or
    fell silent (the others are stopped)."""
    threads = options.threads
    limit, max_errors = error_limit(options.max_error_rate, workload.requests)
    shares = split(
        workload,
        len(load_hosts.clients),
        first_key=options.first_key,
        write_id_base=options.write_ids_from(workload),
    )
    folder = _folder(out)
    folder.mkdir(parents=True, exist_ok=True)
    plans = [
        _plan(
            kind, settings, workload, share, threads, options.seed, max_errors, options.warm_inserts
        )
        for share in shares
    ]
    start = time.time() + START_AHEAD_S
    if options.on_begin is not None:
        # every host's engine holds its first request until then
        options.on_begin(start)
    hosts = [
        _Host(i, client, offset, share, folder / f"host-{i}")
        for i, (client, offset, share) in enumerate(
            zip(load_hosts.clients, load_hosts.offsets, shares, strict=True)
        )
    ]
    ref = (load_hosts.run_id, load_hosts.database_id)
    for host, plan in zip(hosts, plans, strict=True):
        host.folder.mkdir(exist_ok=True)
        at = start + host.share.start_offset_s + host.offset.offset_s
        host.call = host.client.load(*ref, json.dumps(plan), at)
        threading.Thread(target=host.follow, name=f"load-host-{host.index}", daemon=True).start()
    bar = Progress(options.progress, workload.requests, options.label)
    try:
        aborted = _follow(hosts, bar, limit, options, ref)
    except KeyboardInterrupt:
        bar.abandon()
        _keep_what_was_recorded(hosts, out, start, threads, ref)
        raise
    except BaseException:
        bar.abandon()
        for host in hosts:
            host.call.cancel()
        raise
    try:
        result, records = _gather(hosts, out, start, aborted, threads)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    bar.finish(load_summary(result.records, start, options.label))
    return SpreadLoad(
        result, tuple(_record(h, r, start) for h, r in zip(hosts, records, strict=True))
    )


def _plan(
    kind: str,
    settings: LoadSettings,
    workload: Workload,
    share: Share,
    threads: int,
    seed: int,
    max_errors: int | None,
    warm_inserts: int,
) -> native.Plan:
    """Load host ``share.host``'s plan: its steps, rate and keys; the
    checked clients (with ``check:``) on the first host only."""
    plan = native.plan(
        kind,
        settings,
        workload,
        threads=threads,
        seed=seed + share.host,
        max_errors=max_errors,
        existing=workload.existing_keys(warm_inserts),
        first_key=share.first_key,
        write_id_base=share.write_id_base,
    )
    plan["steps"] = [
        {"clients": clients, "connections": connections, "requests": requests, "rate": share.rate}
        for clients, connections, requests in share.steps
    ]
    if workload.moves_keys:
        plan["keys"]["insert_space"] = share.requests  # its own keys, and no others
    if share.host:
        plan["check"] = None
    return plan


def _follow(
    hosts: Sequence[_Host],
    bar: Progress,
    limit: float,
    options: LoadOptions,
    ref: tuple[str, str],
) -> str:
    """Progress until every host has finished; why the load stopped early
    (""), or DbtesterError when a host failed."""
    total = int(bar.total)
    aborted = ""
    stop = EarlyStop(limit, options.health, options.stall_s)
    while not all(h.finished.wait(0) for h in hosts):
        time.sleep(POLL_S)
        _check_hosts(hosts)
        done = sum(h.done for h in hosts)
        errors = sum(h.errors for h in hosts)
        if not aborted:
            aborted = stop.problem(done, errors)
            if aborted:
                _stop_all(hosts, ref)
        bar.update(done, _describe(describe(done, total, errors), len(hosts)))
    _check_hosts(hosts)
    return aborted or stop.over_limit(sum(h.errors for h in hosts))


def _keep_what_was_recorded(
    hosts: Sequence[_Host], out: DatabaseLayout, start: float, threads: int, ref: tuple[str, str]
) -> None:
    """Ctrl-C: every host asked to stop, and their records saved as a single
    host's are, unless a host cannot send them within COLLECT_S or a second
    Ctrl-C comes first."""
    try:
        _stop_all(hosts, ref)
        deadline = time.monotonic() + COLLECT_S
        for host in hosts:
            host.finished.wait(max(0.0, deadline - time.monotonic()))
        if all(h.summary is not None and not h.summary.error for h in hosts):
            _gather(hosts, out, start, "interrupted (Ctrl-C)", threads)
    except (KeyboardInterrupt, DbtesterError, OSError):
        pass  # nothing more to save; the interruption goes on
    finally:
        for host in hosts:
            host.call.cancel()
        shutil.rmtree(_folder(out), ignore_errors=True)


def _folder(out: DatabaseLayout) -> Path:
    """Where the hosts' files land while they arrive."""
    return out.root / "load-hosts"


def _check_hosts(hosts: Sequence[_Host]) -> None:
    """DbtesterError naming the first load host that failed or went silent;
    the others' calls are cancelled (their agents stop their engines)."""
    now = time.monotonic()
    for host in hosts:
        problem = host.failure if host.finished.is_set() else ""
        if not problem and not host.finished.is_set() and now - host.heard > SILENT_S:
            problem = f"agent {host.client.address} stopped answering for {now - host.heard:.0f} s"
        if problem:
            for other in hosts:
                other.call.cancel()
            raise DbtesterError(f"load host {host.index} failed: {problem}")


def _stop_all(hosts: Sequence[_Host], ref: tuple[str, str]) -> None:
    """Every host asked to stop its load (``ref``: the run and database)."""
    for host in hosts:
        with contextlib.suppress(AgentError):
            host.client.stop_load(*ref)


def _gather(
    hosts: Sequence[_Host], out: DatabaseLayout, start: float, aborted: str, threads: int
) -> tuple[LoadResult, list[Records]]:
    """Every host's records merged onto the controller's clock and saved; the
    first host's checked operations; each host's samples."""
    records, offsets = [], []
    for host in hosts:
        assert host.summary is not None
        if host.summary.error:
            raise DbtesterError(
                f"load host {host.index} ({host.client.address}): {host.summary.error}"
            )
        records.append(Records.load(host.path("requests")))
        offsets.append(round(host.offset.offset_s * 1e9))
    merged = merge(records, offsets)
    merged.save(out.requests)
    for host, own, offset in zip(hosts, records, offsets, strict=True):
        own.moved(-offset).save(out.load_host_requests(host.index))
    check = None
    if hosts[0].path("check").exists():
        check = CheckedOperations.load(hosts[0].path("check")).moved(-offsets[0])
        check.save(out.check_history)
    for host in hosts:
        if host.path("client").exists():
            _move_samples(host.path("client"), out.load_host_metrics(host.index), host.offset)
    summaries = [h.summary for h in hosts if h.summary is not None]
    ended = max(s.ended_unix - h.offset.offset_s for s, h in zip(summaries, hosts, strict=True))
    engine = [s.engine_cpu_seconds for s in summaries]
    wait = [s.cpu_wait_seconds for s in summaries]
    result = LoadResult(
        merged,
        start,
        ended,
        sum(s.cpu_seconds for s in summaries),
        aborted,
        threads * len(hosts),
        sum(wait) if min(wait) >= 0 else None,
        sum(engine) if min(engine) >= 0 else None,
        None,
        check,
    )
    return result, records


def _move_samples(source: Path, target: Path, offset: ClockOffset) -> None:
    """A load host's samples CSV, its unix_ms moved onto our clock."""
    import csv

    with source.open(newline="") as inp, target.open("w", newline="") as out:
        rows = csv.reader(inp)
        writer = csv.writer(out)
        header = next(rows, None)
        if header is None:
            return
        writer.writerow(header)
        at = header.index("unix_ms")
        shift = offset.offset_s * 1000.0
        for row in rows:
            row[at] = str(round(float(row[at]) - shift))
            writer.writerow(row)


def _record(host: _Host, records: Records, start: float) -> LoadHostRecord:
    summary = host.summary
    assert summary is not None
    offset = host.offset.offset_s
    started = summary.started_unix - offset
    ended = summary.ended_unix - offset
    skew = None
    if len(records):
        first = float(records.due_ns.min()) / 1e9 - offset
        skew = (first - (start + host.share.start_offset_s)) * 1000.0
        # The load ended with its last answer: the agent noticed later, by as
        # much as a poll, or more on a host short of CPU, and that idle tail
        # would dilute the engine's busy share.
        last = float((records.due_ns + records.latency_ns).max()) / 1e9 - offset
        ended = max(started, min(ended, last))
    engine = summary.engine_cpu_seconds if summary.engine_cpu_seconds >= 0 else None
    wait = summary.cpu_wait_seconds if summary.cpu_wait_seconds >= 0 else None
    clients, connections, _ = max(host.share.steps)
    return LoadHostRecord(
        index=host.index,
        agent=host.client.address,
        clock_offset_s=offset,
        clock_rtt_s=host.offset.round_trip_s,
        requests=host.share.requests,
        clients=clients,
        connections=connections,
        rate=host.share.rate,
        start_skew_ms=skew,
        started_unix=started,
        ended_unix=ended,
        counts=records.counts(),
        throughput=records.throughput(started),
        cpu_seconds=summary.cpu_seconds,
        engine_cpu_seconds=engine,
        cpu_wait_seconds=wait,
        workers=summary.workers,
        cores=summary.cores,
        cpu_limited=at_cpu_limit(engine, wait, summary.workers, ended - started),
    )


def at_cpu_limit(run: float | None, wait: float | None, workers: int, seconds: float) -> bool:
    """Whether a host's engine threads were runnable (on a CPU, or waiting for
    one) for CLIENT_BUSY of the time they had: then they, not the database,
    set the pace. A starved engine waits rather than runs; both count. It is
    the search's rule for a client-bound probe, one measure with one
    threshold: a host starved on a shared core, answering 68% of its offered
    rate, measured 81% (its few clients also wait for replies, when its
    threads are not runnable)."""
    if run is None or seconds <= 0:
        return False
    return run + (wait or 0.0) >= CLIENT_BUSY * workers * seconds


def _describe(text: Callable[[float], str], hosts: int) -> Callable[[float], str]:
    """The progress bar's text, saying how many hosts share the load."""
    return lambda rate: f"{text(rate)}  ({hosts} load hosts)"
