"""The controller's side of the load: build the plan, start the native engine,
show progress, enforce the error limit and the health check, keep the records.

The engine runs in this process on threads of its own (``workers`` of them,
default 1: on a shared 2-core machine one thread measured best, a second
competes with the database). Python polls its counters four times a second
and never runs per request.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TextIO

import psutil

from dbtester.databases.base import LoadSettings
from dbtester.errors import DbtesterError
from dbtester.load import native
from dbtester.load.client_metrics import ClientSampler
from dbtester.results import (
    CheckedOperations,
    CompactionRecord,
    DatabaseLayout,
    InformerLags,
    InformerRecord,
    LockHolds,
    Records,
    SessionExpiry,
    WatchEvents,
)
from dbtester.util.progress import Progress
from dbtester.util.sched import SchedMeter
from dbtester.workloads import Workload
from dbtester.workloads.write import WriteWorkload

if TYPE_CHECKING:
    from dbtester._engine import Load

__all__ = [
    "DEFAULT_OPTIONS",
    "DEFAULT_WORKERS",
    "ENGINE_THREADS",
    "POLL_S",
    "READABLE_WAIT_S",
    "STALLED",
    "EarlyStop",
    "LoadOptions",
    "LoadResult",
    "cpu_seconds",
    "describe",
    "drain",
    "error_limit",
    "load_keys",
    "load_summary",
    "run_load",
    "seed_key",
    "wait_readable",
    "warm_up",
]

DEFAULT_WORKERS = 1
#: the names of the engine's threads start so (engine/src/engine.rs)
ENGINE_THREADS = "dbtester-"
POLL_S = 0.25
#: how long every endpoint gets to return what was written before the load
READABLE_WAIT_S = 30.0
#: between two reads of an endpoint that did not have the data yet
READABLE_RETRY_S = 0.05
#: how long a stopped engine may take to hand back what it recorded
STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class LoadResult:
    records: Records
    started_unix: float
    ended_unix: float
    cpu_seconds: float  # the whole client process, user + system, during the load
    aborted: str  # why the run stopped early ("" if it did not)
    workers: int  # engine threads
    #: the engine's threads' time waiting for a CPU during the load (None:
    #: not measured)
    cpu_wait_seconds: float | None = None
    #: the engine's threads' time on a CPU during the load (None: not measured)
    engine_cpu_seconds: float | None = None
    #: what the watchers saw (type: watch only)
    watch: WatchEvents | None = None
    #: what the checked clients did (with ``check:`` only)
    check: CheckedOperations | None = None
    #: what the workload counted beside the records, by name (type:
    #: kubernetes: conflicts, retries, list pages; empty for the others)
    counters: Mapping[str, int] = field(default_factory=dict)
    #: type: kubernetes: the compactions it made, in order
    compactions: tuple[CompactionRecord, ...] = ()
    #: type: kubernetes: what each informer did, and their events' lags
    informers: tuple[InformerRecord, ...] = ()
    informer_lags: InformerLags | None = None
    #: type: kubernetes: events seen expiring, (second's start, count)
    expirations: tuple[tuple[float, int], ...] = ()
    #: type: lock: every acquisition
    lock_holds: LockHolds | None = None
    #: type: lock: the holders an expire_session fault made crash
    session_expiries: tuple[SessionExpiry, ...] = ()

    @property
    def ok(self) -> int:
        return int((self.records.code == 0).sum())

    @property
    def errors(self) -> int:
        return self.records.errors()


#: how a load stopped for lack of successes begins its ``aborted``
STALLED = "no request succeeded for"


@dataclass(frozen=True)
class LoadOptions:
    """How a measured load runs, whichever engines run it: this process's
    (:func:`run_load`) or the load hosts' (``control.spread.run_spread``)."""

    #: engine threads (None: DEFAULT_WORKERS)
    workers: int | None = None
    #: the share of requests that may fail before the load stops (1: no limit)
    max_error_rate: float = 1.0
    #: where the progress bar goes (None: nowhere)
    progress: TextIO | None = sys.stderr
    #: the progress bar's and the summary line's name
    label: str = ""
    seed: int = 1
    #: polled four times a second; a non-empty answer (e.g. "agent
    #: 10.0.0.2:3500 stopped answering") stops the load and becomes ``aborted``
    health: Callable[[], str] | None = None
    #: a load in which no request succeeded for this long stops (``aborted``
    #: then starts with STALLED)
    stall_s: float | None = None
    #: the keys a mixed workload's warm-up (or earlier loads on the cluster)
    #: inserted
    warm_inserts: int = 0
    #: a write load's first key, past earlier loads' keys
    first_key: int = 0
    #: where a mixed load's write ids start (None: past the warm-up's)
    write_id_base: int | None = None
    #: called once with the load's start (time.time() of its first due
    #: request, every connection open), at most a poll (POLL_S) after it;
    #: never when the load stopped before it began
    on_begin: Callable[[float], None] | None = None
    #: no new request is sent once this long has passed since the load
    #: began (a slice: it ends on time, not early), judged at each poll
    #: (POLL_S); requests in flight then finish (None: all ``requests``)
    duration_s: float | None = None
    #: a lock load's expire_session faults: (seconds after its start, lock),
    #: in schedule order
    expire_sessions: tuple[tuple[float, int], ...] = ()

    @property
    def threads(self) -> int:
        return self.workers or DEFAULT_WORKERS

    def write_ids_from(self, workload: Workload) -> int:
        """Where the load's write ids start: after the warm-up's, unless set."""
        return workload.warmup_requests if self.write_id_base is None else self.write_id_base


DEFAULT_OPTIONS = LoadOptions()


def run_load(
    kind: str,
    settings: LoadSettings,
    workload: Workload,
    out: DatabaseLayout,
    options: LoadOptions = DEFAULT_OPTIONS,
) -> LoadResult:
    """Drive ``workload`` against ``settings.endpoints`` as ``options`` say;
    save the records and the client sampler's CSV into ``out``.

    ``aborted`` says why the load stopped early: the health check, a stall,
    the error limit. Ctrl-C stops the engine within a second; what it
    recorded is saved."""
    threads = options.threads
    limit, max_errors = error_limit(options.max_error_rate, workload.requests)
    out.root.mkdir(parents=True, exist_ok=True)
    load_plan = native.plan(
        kind,
        settings,
        workload,
        threads=threads,
        seed=options.seed,
        max_errors=max_errors,
        # a mixed warm-up's inserts exist too, and its writes came first
        existing=workload.existing_keys(options.warm_inserts),
        first_key=options.first_key,
        write_id_base=options.write_ids_from(workload),
        expire_sessions=options.expire_sessions,
    )
    cpu_before = cpu_seconds()
    sched = SchedMeter(ENGINE_THREADS)
    sched.sample()
    called = time.time()
    load = native.start(load_plan)
    began = _Began(load, options.on_begin, options.duration_s)
    sampler = ClientSampler(
        psutil.Process(), out.client_metrics, settings.endpoints, lambda: load.progress()[:2]
    )
    sampler.start()
    aborted = ""
    bar = Progress(options.progress, workload.requests, options.label)
    try:
        aborted = _watch(load, limit, bar, options.health, options.stall_s, began.tick(sched))
    finally:
        sampler.stop()
        # Whatever happened, the requests that were made are kept.
        got = _collect(load, out)
    ended = time.time()
    # The load's time runs from its first request, not from its connecting
    # (a ZooKeeper session or TLS handshakes can take a second on a busy host).
    started = began.poll() or called
    sched.sample()
    bar.finish(load_summary(got.records, started, options.label))
    cpu = cpu_seconds() - cpu_before
    wait, run = sched.wait_seconds, sched.run_seconds
    return LoadResult(
        got.records,
        started,
        ended,
        cpu,
        aborted,
        threads,
        wait,
        run,
        got.watch,
        got.check,
        got.counters,
        got.compactions,
        got.informers,
        got.informer_lags,
        got.expirations,
        got.lock_holds,
        got.session_expiries,
    )


def warm_up(
    kind: str,
    settings: LoadSettings,
    workload: Workload,
    options: LoadOptions = DEFAULT_OPTIONS,
) -> LoadResult:
    """``workload.warmup_requests`` requests before the measured load, with its
    clients, connections and rate (the largest client step). Writes go to the
    keys after the measured load's (numbers from ``workload.requests`` on), so
    neither overwrites the other and verification can account for both.
    Nothing is saved: the records come back for the caller to report apart.
    DbtesterError when the warm-up stops early (its errors count against the
    workload's ``max_error_rate`` like the load's). Of ``options`` it takes
    the workers, progress, label, seed and health check."""
    warm = workload.warm_up()
    limit, max_errors = error_limit(workload.max_error_rate, warm.requests)
    load_plan = native.plan(
        kind,
        settings,
        warm,
        threads=options.threads,
        seed=options.seed,
        max_errors=max_errors,
        first_key=workload.warm_up_first_key(),
    )
    result = _unmeasured(load_plan, warm.requests, "warm-up", options, limit)
    if result.aborted:
        raise DbtesterError(f"warm-up stopped early: {result.aborted}")
    return result


def load_keys(
    kind: str,
    settings: LoadSettings,
    workload: Workload,
    options: LoadOptions = DEFAULT_OPTIONS,
) -> LoadResult:
    """A mixed workload's load phase: ``key_count`` keys written, every one
    acknowledged, or DbtesterError. Not measured; the result is reported apart.
    Of ``options`` it takes the workers, progress and label."""
    load_plan = native.load_phase(kind, settings, workload, threads=options.threads)
    keys = load_plan["steps"][0]["requests"]
    result = _unmeasured(load_plan, keys, "load phase", replace(options, health=None), 0)
    if result.aborted or result.records.counts() != {"ok": keys}:
        raise DbtesterError(
            f"the load phase did not write all {keys:,} keys:"
            f" {result.aborted or result.records.counts()}"
        )
    return result


def _unmeasured(
    load_plan: native.Plan, total: int, what: str, options: LoadOptions, limit: float
) -> LoadResult:
    """Runs ``load_plan`` with a progress bar and saves nothing: a load that is
    in no figure (a warm-up, a load phase). ``aborted`` says why it stopped early."""
    cpu_before = cpu_seconds()
    started = time.time()
    load = native.start(load_plan)
    name = f"{options.label} {what}" if options.label else what
    bar = Progress(options.progress, total, name)
    try:
        aborted = _watch(load, limit, bar, options.health)
    finally:
        records = _collect(load, None).records
    bar.finish(load_summary(records, started, name) + ", not counted")
    cpu = cpu_seconds() - cpu_before
    return LoadResult(records, started, time.time(), cpu, aborted, load_plan["threads"])


def wait_readable(
    kind: str, settings: LoadSettings, workload: Workload, *, wait_s: float = READABLE_WAIT_S
) -> None:
    """Returns once every endpoint serves the data the load will read, with the
    workload's consistency: the seeded key (read), or the load phase's last
    key (mixed; members apply writes in order, so the last one there means
    every one is). A follower serving stale reads may not have applied the
    writes yet when the load begins; its reads would fail. DbtesterError
    naming the endpoints that never did within ``wait_s``."""
    if workload.SEEDING == "nothing":
        return
    deadline = time.monotonic() + wait_s
    waiting = list(settings.endpoints)
    last: dict[str, str] = {}
    while waiting:
        for endpoint in list(waiting):
            outcome = _read_once(kind, replace(settings, endpoints=(endpoint,)), workload)
            if outcome == "ok":
                waiting.remove(endpoint)
            last[endpoint] = outcome
        if not waiting:
            return
        if time.monotonic() >= deadline:
            named = ", ".join(f"{e} ({last[e]})" for e in waiting)
            raise DbtesterError(
                f"the data written before the load never became readable within"
                f" {wait_s:g} s ({workload.read_consistency} reads) on: {named}"
            )
        time.sleep(READABLE_RETRY_S)


def _read_once(kind: str, settings: LoadSettings, workload: Workload) -> str:
    """One read of the key the readiness check asks for; its outcome's name."""
    read = workload.model_copy(
        update={"requests": 1, "clients": 1, "connections": 1, "client_steps": (), "rate": 0.0}
    )
    key = workload.readiness_key  # written last, so readable last
    load = native.start(native.single_operation(kind, settings, read, "read", key=key))
    while not load.wait(POLL_S):
        pass
    try:
        records = native.records_of(load.result())
    except RuntimeError as exc:  # e.g. the endpoint refuses connections
        return str(exc).splitlines()[0][:120]
    return next(iter(records.counts()), "no reply")


def seed_key(kind: str, settings: LoadSettings) -> None:
    """Write key 0 with the workload's value: what a read workload reads."""
    workload = WriteWorkload(
        requests=1,
        key_size=settings.key_size,
        value_size=settings.value_size,
        clients=1,
        connections=1,
        same_key=True,
    )
    load = native.start(native.plan(kind, settings, workload))
    while not load.wait(POLL_S):  # Ctrl-C raises here; the engine stops with its handle
        pass
    try:
        records = native.records_of(load.result())
    except RuntimeError as exc:
        raise DbtesterError(f"seeding the read key failed: {exc}") from None
    if records.counts() != {"ok": 1}:
        raise DbtesterError(f"seeding the read key failed: {records.counts()}")


def error_limit(rate: float, requests: int) -> tuple[float, int | None]:
    """How many of ``requests`` may fail at ``rate``, and the engine's own stop
    (None: no limit, at a rate of 1)."""
    limit = rate * requests
    return limit, (int(limit) if rate < 1.0 else None)


def drain(load: Load) -> None:
    """Wait for a stopped engine to hand back its records; a second Ctrl-C does
    not cut that short."""
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:
        with contextlib.suppress(KeyboardInterrupt):
            if load.wait(POLL_S):
                return
        load.stop()


@dataclass(frozen=True)
class _Collected:
    """What the engine gave back at the end of a load."""

    records: Records
    watch: WatchEvents | None
    check: CheckedOperations | None
    counters: dict[str, int]
    compactions: tuple[CompactionRecord, ...]
    informers: tuple[InformerRecord, ...]
    informer_lags: InformerLags | None
    expirations: tuple[tuple[float, int], ...]
    lock_holds: LockHolds | None
    session_expiries: tuple[SessionExpiry, ...]


def _collect(load: Load, out: DatabaseLayout | None) -> _Collected:
    """The engine's records, its watchers' events and its checked clients'
    operations, saved to ``out`` (unless it is None), and the workload's
    counters and compactions; a failed engine's error."""
    if not load.wait(0):
        load.stop()
        drain(load)
    try:
        result = load.result()
    except RuntimeError as exc:
        raise DbtesterError(f"load generator failed: {exc}") from None
    records = native.records_of(result)
    watch = native.watch_events_of(result, len(records))
    check = native.checked_operations_of(result)
    if out is not None:
        records.save(out.requests)
        if watch is not None:
            watch.save(out.watch_events)
        if check is not None:
            check.save(out.check_history)
    informers, lags = native.informers_of(result)
    if out is not None and lags is not None:
        lags.save(out.informer_lags)
    counters = {str(name): int(count) for name, count in result.get("counters", {}).items()}
    compactions = native.compactions_of(result)
    expirations = native.expirations_of(result)
    holds = native.lock_holds_of(result)
    if out is not None and holds is not None:
        holds.save(out.lock_holds)
    expiries = native.session_expiries_of(result, holds)
    return _Collected(
        records, watch, check, counters, compactions, informers, lags, expirations, holds, expiries
    )


class EarlyStop:
    """Why a running load should stop early, judged at each poll of its
    progress: the health check's problem, no success for ``stall_s``, or
    more errors than ``limit``."""

    def __init__(
        self, limit: float, health: Callable[[], str] | None, stall_s: float | None
    ) -> None:
        self.limit = limit
        self.health = health
        self.stall_s = stall_s
        self._succeeded, self._since = 0, time.monotonic()  # successes, when they last grew

    def problem(self, done: int, errors: int) -> str:
        """Why to stop now ("": go on)."""
        problem = self.health() if self.health is not None else ""
        if done - errors > self._succeeded:
            self._succeeded, self._since = done - errors, time.monotonic()
        elif (
            self.stall_s is not None
            and not problem
            and time.monotonic() - self._since > self.stall_s
        ):
            problem = f"{STALLED} {self.stall_s:g} s"
        return problem or self.over_limit(errors)

    def over_limit(self, errors: int) -> str:
        """Why ``errors`` are too many ("": they are not)."""
        if errors > self.limit:
            return f"{errors:,} errors passed the limit of {self.limit:,.0f}"
        return ""


class _Began:
    """Reads when ``load`` began and tells ``on_begin``, once; stops it
    ``duration_s`` after (None: never)."""

    def __init__(
        self,
        load: Load,
        on_begin: Callable[[float], None] | None,
        duration_s: float | None = None,
    ) -> None:
        self.load = load
        self.on_begin = on_begin
        self.duration_s = duration_s
        self.at: float | None = None
        self.ended = False

    def poll(self) -> float | None:
        if self.at is None:
            ns = self.load.began_unix_ns()
            if ns is not None:
                self.at = ns / 1e9
                if self.on_begin is not None:
                    self.on_begin(self.at)
        return self.at

    def tick(self, sched: SchedMeter) -> Callable[[], None]:
        """What the progress loop calls at every poll."""

        def tick() -> None:
            sched.sample()
            self.poll()
            self._end_on_time()

        return tick

    def _end_on_time(self) -> None:
        if self.ended or self.duration_s is None or self.at is None:
            return
        if time.time() - self.at >= self.duration_s:
            self.load.stop()  # what is in flight finishes: the engine's grace
            self.ended = True


def _watch(
    load: Load,
    limit: float,
    bar: Progress,
    health: Callable[[], str] | None,
    stall_s: float | None = None,
    tick: Callable[[], None] | None = None,
) -> str:
    """Progress until the engine finishes; why it stopped early, or "". On
    Ctrl-C the engine is stopped and drained before KeyboardInterrupt goes on.
    ``tick`` is called at every poll."""
    total = int(bar.total)
    aborted = ""
    stop = EarlyStop(limit, health, stall_s)
    try:
        while not load.wait(POLL_S):
            if tick is not None:
                tick()
            done, errors, _step = load.progress()
            if not aborted:
                aborted = stop.problem(done, errors)
                if aborted:
                    load.stop()
            bar.update(done, describe(done, total, errors))
    except KeyboardInterrupt:
        bar.abandon()
        load.stop()
        drain(load)
        raise
    done, errors, _step = load.progress()
    return aborted or stop.over_limit(errors)


def load_summary(records: Records, started: float, label: str) -> str:
    """The load in one line, in the table's terms: TOTAL-SECONDS and AVG-THROUGHPUT."""
    errors = records.errors()
    seconds, rate = records.span_s(started), records.throughput(started)
    return (
        f"{label + ' ' if label else ''}{len(records):,} requests in {seconds:.2f} s"
        f" ({rate:,.0f} req/s answered), {errors:,} errors"
    )


def describe(done: int, total: int, errors: int) -> Callable[[float], str]:
    """The progress bar's text for ``done`` of ``total`` requests."""
    return lambda rate: f"{done:,}/{total:,}  {rate:,.0f} req/s  errors {errors:,}"


def cpu_seconds() -> float:
    """This process's CPU time so far, user + system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
