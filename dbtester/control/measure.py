"""The load phases of a database's run, on a serving :class:`Cluster`: what
the load reads written first (:class:`Seeded`), the warm-up
(:class:`Warmed`), then the measured load, or a search of loads
(:class:`Measured`), and whether it went as planned (:func:`load_problem`).

Each phase takes the outputs it needs and returns its own, frozen; the
scheduled faults run beside the measured load (``control.faults``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace

from dbtester.analyze.faults import scheduled
from dbtester.analyze.probes import ProbeRule
from dbtester.config.faults import CLIENT
from dbtester.config.search import Search
from dbtester.control.cluster import (
    Cluster,
    clock_offset,
    diagnose,
    remote_client,
    warn_plain_token,
)
from dbtester.control.faults import FaultRunner
from dbtester.control.job import DatabaseJob
from dbtester.control.search import KeysExhaustedError, ProbeLoads, SearchOutcome, search_rate
from dbtester.control.slices import Turns
from dbtester.control.spread import LoadHosts, run_spread
from dbtester.databases.base import LoadSettings
from dbtester.errors import AgentError, DbtesterError
from dbtester.load import (
    STALLED,
    LoadResult,
    load_keys,
    run_load,
    seed_key,
    wait_readable,
    warm_up,
)
from dbtester.results import OPERATIONS, DatabaseLayout, FaultRecord, LoadHostRecord
from dbtester.util.net import is_loopback
from dbtester.util.paths import link_or_copy
from dbtester.util.progress import Progress

__all__ = [
    "Measured",
    "Seeded",
    "Warmed",
    "connect_load_hosts",
    "fault_runner",
    "found",
    "load_problem",
    "measure_load",
    "measure_search",
    "measure_slices",
    "seed",
    "warm",
]


@dataclass(frozen=True)
class Seeded:
    """What the load reads is written and readable everywhere; ``loaded`` is a
    mixed workload's load phase (None for the others)."""

    loaded: LoadResult | None = None


@dataclass(frozen=True)
class Warmed:
    """The warm-up's requests (None: the workload has none)."""

    warmup: LoadResult | None = None

    @property
    def inserts(self) -> int:
        """How many keys the warm-up inserted (a mixed workload's later
        inserts are numbered after them)."""
        if self.warmup is None:
            return 0
        return int((self.warmup.records.ops == OPERATIONS.index("insert")).sum())


@dataclass(frozen=True)
class Measured:
    """The measured load (None: a search that ran no probe), each load host's
    part in it, and with a search its outcome (every probe's load)."""

    load: LoadResult | None
    load_hosts: tuple[LoadHostRecord, ...] = ()
    searched: SearchOutcome | None = None
    #: interleave: slices: every slice's load, in order (``load`` is the last)
    slices: tuple[LoadResult, ...] = ()

    @property
    def loads(self) -> tuple[LoadResult, ...]:
        """Every measured load: the search's probes, the slices, or the one load."""
        if self.searched is not None:
            return tuple(self.searched.loads)
        if self.slices:
            return self.slices
        return () if self.load is None else (self.load,)


def seed(job: DatabaseJob, cluster: Cluster) -> Seeded:
    """Write what the load reads (read: the one key; mixed: the load
    phase's keys), then wait until every endpoint returns it."""
    w, settings = job.db.workload, job.settings(cluster.endpoints, cluster.access)
    loaded = None
    try:
        if (made := job.kind.prepare(settings)) is not None:
            job.say(made)
        if w.prefill_keys:
            prefill(job, settings)
        if w.SEEDING == "one-key":
            seed_key(job.db.kind, settings)
        elif (phase := w.load_phase()) is not None:
            job.say(f"load phase, {phase.requests:,} keys (not counted)")
            loaded = load_keys(job.db.kind, settings, w, job.load_options())
        wait_readable(job.db.kind, settings, w)
    except DbtesterError as exc:
        raise job.failed(exc) from None
    return Seeded(loaded)


def prefill(job: DatabaseJob, settings: LoadSettings) -> None:
    """The workload's pre-filled keys, in the kind's batches, with progress."""
    w = job.db.workload
    what = f"pre-fill, {w.prefill_keys:,} keys of {w.prefill_value_size:,} bytes"
    job.say(f"{what} (not counted, not verified)")
    bar = Progress(job.load_options().progress, w.prefill_keys, f"{job.db.id} pre-fill")
    done = 0

    def advance(written: int) -> None:
        nonlocal done
        done += written
        bar.update(done, lambda rate: f"{done:,} keys, {rate:,.0f} keys/s")

    job.kind.prefill(settings, w.prefill_keys, w.prefill_value_size, advance)
    bar.finish(f"{job.db.id} pre-fill: {done:,} keys in {bar.elapsed:.1f} s, not counted")


def warm(job: DatabaseJob, cluster: Cluster) -> Warmed:
    """The workload's warm-up requests, if it has any: in no figure."""
    w = job.db.workload
    if not w.warmup_requests:
        return Warmed()
    job.say(f"warm-up, {w.warmup_requests:,} requests (not counted)")
    options = replace(job.load_options(), health=lambda: cluster.health.problem)
    try:
        return Warmed(
            warm_up(job.db.kind, job.settings(cluster.endpoints, cluster.access), w, options)
        )
    except DbtesterError as exc:
        raise job.failed(exc) from None


def connect_load_hosts(job: DatabaseJob, stack: ExitStack) -> LoadHosts | None:
    """The load hosts' agents, ready, their clocks measured (their clients
    closed with ``stack``); None when this process runs the load."""
    if not job.load_hosts:
        return None
    if any(not is_loopback(h.address) for h in job.load_hosts):
        warn_plain_token(job.reporter)
    clients = [remote_client(h) for h in job.load_hosts]
    for client in clients:
        stack.callback(client.close)
    offsets = []
    for client in clients:
        try:
            client.wait_ready(timeout=30.0)
            offsets.append(clock_offset(client))
        except AgentError as exc:
            raise job.failed(f"load host {exc}") from None
    return LoadHosts(tuple(clients), tuple(offsets), *job.member_ref)


def fault_runner(job: DatabaseJob, cluster: Cluster) -> FaultRunner:
    """The test case's fault schedule for this cluster, not yet started."""
    return FaultRunner(
        job.faults,
        job.kind,
        cluster.peers,
        cluster.clients,
        [m.clock_offset_s for m in cluster.members],
        job.member_ref,
        job.reporter,
        job.db.id,
        access=cluster.access,
    )


def measure_load(
    job: DatabaseJob,
    cluster: Cluster,
    warmed: Warmed,
    hosts: LoadHosts | None,
    faults: FaultRunner,
) -> Measured:
    """The measured load, from this process's engine or the load hosts',
    while ``faults`` (started with it) are applied. A load that stopped
    early is returned, not raised: :func:`load_problem` says why."""
    w = job.db.workload
    options = replace(
        job.load_options(),
        # Errors are what a scheduled fault is for: counted, never a limit.
        max_error_rate=1.0 if job.faults else w.max_error_rate,
        # ... but a cluster that never recovers must not be loaded forever
        stall_s=job.fault_recovery_s if job.faults else None,
        health=lambda: cluster.health.problem or faults.problem,
        warm_inserts=warmed.inserts,
        on_begin=faults.begin,
        expire_sessions=tuple(
            (f.at, f.lock) for f in job.faults if f.action in CLIENT and f.lock is not None
        ),
    )
    settings = job.settings(cluster.endpoints, cluster.access)
    if hosts is None:
        job.say(f"{w.type} load, {w.requests:,} requests")
        return Measured(run_load(job.db.kind, settings, w, job.out, options))
    job.say(f"{w.type} load, {w.requests:,} requests from {len(hosts.clients)} load hosts")
    try:
        spread = run_spread(job.db.kind, settings, w, job.out, hosts, options)
    except DbtesterError as exc:
        raise job.failed(exc) from None
    return Measured(spread.result, load_hosts=spread.hosts)


def measure_search(job: DatabaseJob, cluster: Cluster, warmed: Warmed, search: Search) -> Measured:
    """Probe rates on this cluster until the search ends; the highest
    passing probe (none: the lowest rate tried) becomes the trial's load."""
    w = job.db.workload
    label = f"p{search.percentile:g}"
    job.say(
        f"searching the highest {w.type} rate with {label} within"
        f" {search.slo_ms:g} ms ({search.hold_s:g} s per rate, from"
        f" {search.start_rate:,g}/s)"
    )
    options = replace(
        job.load_options(),
        health=lambda: cluster.health.problem,
        warm_inserts=warmed.inserts,
    )
    probes = ProbeLoads(
        job.db.kind, job.settings(cluster.endpoints, cluster.access), w, job.out, options
    )
    outcome = search_rate(
        probes,
        rule=ProbeRule(search.slo_ms, search.percentile, w.max_error_rate),
        clients=w.clients,
        hold_s=search.hold_s,
        start_rate=search.start_rate,
        precision=search.precision,
        budget_s=search.time_budget,
        say=job.say,
    )
    load = None
    if outcome.chosen is not None:
        load = outcome.loads[outcome.chosen]
        _adopt(job.out.probe(outcome.chosen + 1), job.out)
    job.say(found(outcome, search))
    return Measured(load, searched=outcome)


def measure_slices(
    job: DatabaseJob,
    cluster: Cluster,
    warmed: Warmed,
    turns: Turns,
    keep: Callable[[int, LoadResult], None],
) -> Measured:
    """The measured load in slices, one each time ``turns`` says, each into
    the database's trial of that number (``keep`` is given it at once), its
    keys past the earlier slices'; until no more turns come, the workload's
    ``requests`` are spent, or a slice stops early."""
    w = job.db.workload
    options = replace(
        job.load_options(),
        health=lambda: cluster.health.problem or turns.health(),
        warm_inserts=warmed.inserts,
        max_error_rate=w.max_error_rate,
        # a closed loop's slice ends on time; an open loop's has its requests
        duration_s=None if w.rate else turns.slice_s,
    )
    loads = ProbeLoads(
        job.db.kind,
        job.settings(cluster.endpoints, cluster.access),
        w,
        job.out,
        options,
        into=lambda number: job.store.database(job.db.id, number),
        what="slice",
    )
    turns.ready()
    done: list[LoadResult] = []
    left = w.requests
    while (number := turns.next_slice()) is not None:
        per_slice = round(w.rate * turns.slice_s) if w.rate else _closed_slice_cap(done, left)
        try:
            load = loads(number, w.rate, max(1, min(per_slice, left)))
        except KeysExhaustedError as exc:
            turns.done(more=False)
            raise job.failed(exc) from None
        done.append(load)
        keep(number, load)
        left -= len(load.records)
        more = left > 0 and not load.aborted
        turns.done(more)
        if not more:
            break
    return Measured(done[-1] if done else None, slices=tuple(done))


def _closed_slice_cap(done: Sequence[LoadResult], left: int) -> int:
    """A closed-loop slice's most requests: it ends on time, and the engine
    makes room for its records up front, so three times the last slice's
    (at least 10,000), not every request left."""
    if not done:
        return left
    return min(left, max(10_000, 3 * len(done[-1].records)))


def load_problem(
    job: DatabaseJob, cluster: Cluster, measured: Measured, faults: Sequence[FaultRecord]
) -> str:
    """Why the measured load failed the run ("": it did not): the cluster
    did not recover from a fault, the last load (a search: its last probe;
    a probe that stopped early ends the search) stopped early, saying why
    if the agents can tell, reads returned a wrong value, or a scheduled
    fault was not applied."""
    loads = measured.loads
    if measured.searched is None and loads and loads[-1].aborted.startswith(STALLED):
        return f"{job.db.id}: {_not_recovered(job, loads[-1], faults)}"
    aborted = loads[-1].aborted if loads else ""
    if aborted:
        last = "load" if measured.searched is None else f"probe {len(loads)}"
        told = diagnose(job, cluster)
        cause = f"; {told}" if told and told not in aborted else ""
        return f"{job.db.id}: {last} stopped early: {aborted}{cause}"
    wrong = sum(load.records.counts().get("wrong-value", 0) for load in loads)
    if wrong:
        return f"{job.db.id}: {wrong:,} reads returned a wrong value"
    # a fault that failed after the last request, or was never due within the load
    missed = next((f for f in faults if f.error), None)
    if missed is not None:
        return f"{job.db.id}: fault {scheduled(missed)}: {missed.error}"
    return ""


def _not_recovered(job: DatabaseJob, load: LoadResult, faults: Sequence[FaultRecord]) -> str:
    """The load stalled: what the cluster did not recover from."""
    applied = [r for r in faults if not r.error]
    last = applied[-1] if applied else None
    after = f" after {last.action} member {last.member} at {last.at_s:g} s" if last else ""
    return (
        f"the cluster did not recover{after}: {load.aborted} (fault_recovery:"
        f" {job.fault_recovery_s:g} s)"
    )


def found(outcome: SearchOutcome, search: Search) -> str:
    """What a search established, in one sentence."""
    target = f"p{search.percentile:g} within {search.slo_ms:g} ms"
    tried = f"{len(outcome.probes)} probe{'s' if len(outcome.probes) != 1 else ''}"
    if outcome.maximum is None:
        if outcome.stopped == "nothing meets the target":
            return f"no rate met {target}, down to {outcome.failing:,g}/s ({tried})"
        return f"no rate met {target} before the search stopped ({outcome.stopped}; {tried})"
    highest = f"the highest rate with {target} is {outcome.maximum:,.0f}/s"
    if outcome.stopped == "precision" and outcome.failing is not None:
        return f"{highest}; {outcome.failing:,.0f}/s failed ({tried}){_again(outcome)}"
    why = {
        "client-bound": "the client could not offer more, so the database may sustain more",
        "ceiling": "the highest rate a search offers",
        "time budget": f"the time budget ({search.time_budget:g} s) ran out",
        "key space": "key_size holds no more keys",
    }.get(outcome.stopped, outcome.stopped)
    return f"{highest} at least: {why} ({tried})"


def _again(outcome: SearchOutcome) -> str:
    """What probing the maximum once more at the end showed."""
    if outcome.confirmed is None:
        return ""
    if outcome.confirmed:
        return "; it passed again when probed once more at the end"
    last = outcome.probes[-1]
    return (
        f"; probed once more at the end it failed ({'; '.join(last.failures)}): the cluster"
        " was slower after the search's probes (their data stays, and some overloaded it),"
        " so this maximum depends on the order of the probes"
    )


def _adopt(probe: DatabaseLayout, trial: DatabaseLayout) -> None:
    """The chosen probe's requests and client metrics become the trial's own
    (linked where the file system allows, else copied)."""
    for source, target in (
        (probe.requests, trial.requests),
        (probe.client_metrics, trial.client_metrics),
    ):
        if source.exists():
            link_or_copy(source, target)
