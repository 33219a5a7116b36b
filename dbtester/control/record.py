"""The last step of a database's run: what its phases returned
(:class:`Collected`, whichever of them ran) made into the frozen
:class:`~dbtester.results.DatabaseRecord` that ``run.json`` holds, its
notes included. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from dbtester.analyze.probes import Probe
from dbtester.control.job import DatabaseJob
from dbtester.control.measure import Measured, Seeded, Warmed, found
from dbtester.control.search import SearchOutcome
from dbtester.control.verify import Counted, Judged
from dbtester.load import LoadResult
from dbtester.results import (
    DatabaseRecord,
    FaultRecord,
    LoadHostRecord,
    LoadWindow,
    MemberRecord,
    ProbeRecord,
    SearchRecord,
)

__all__ = ["Collected", "load_hosts_note", "record", "slice_record", "slice_records"]


@dataclass(frozen=True)
class Collected:
    """What a database's phases returned, as far as the run got: a phase
    that did not run (a failure before it, Ctrl-C) left its default."""

    started_unix: float
    #: why the run failed ("": it passed)
    error: str = ""
    endpoints: tuple[str, ...] = ()
    #: the members as the last phase that reached them left them
    members: tuple[MemberRecord, ...] = ()
    seeded: Seeded = field(default_factory=Seeded)
    warmed: Warmed = field(default_factory=Warmed)
    measured: Measured | None = None
    #: each scheduled fault as it happened
    faults: tuple[FaultRecord, ...] = ()
    counted: Counted = field(default_factory=Counted)
    judged: Judged = field(default_factory=Judged)


def record(job: DatabaseJob, collected: Collected) -> DatabaseRecord:
    """The database's record, built once."""
    c, measured = collected, collected.measured
    return DatabaseRecord(
        run_id=job.run_id,
        database=job.db.model_dump(mode="json"),
        started_unix=c.started_unix,
        endpoints=c.endpoints,
        embedded=job.db.embedded,
        members=c.members,
        error=c.error,
        verification=c.counted.verification,
        load=_window(measured.load if measured else None),
        warmup=_window(c.warmed.warmup),
        load_phase=_window(c.seeded.loaded),
        faults=c.faults,
        trial=job.trial,
        search=_search_record(job, measured.searched if measured else None),
        correctness=c.judged.correctness,
        load_hosts=measured.load_hosts if measured else (),
        notes=_notes(job, c),
        not_found_outcome=job.kind.not_found,
        slice_s=job.turns.slice_s if job.turns is not None else None,
    )


def slice_record(job: DatabaseJob, collected: Collected, number: int) -> DatabaseRecord:
    """Slice ``number``'s record (interleave: slices): its load is trial
    ``number``'s; the load phase and warm-up, which ran once before every
    slice, are the first's."""
    if number != 1:
        collected = replace(collected, seeded=Seeded(), warmed=Warmed())
    return record(replace(job, trial=number), collected)


def slice_records(job: DatabaseJob, collected: Collected) -> tuple[DatabaseRecord, ...]:
    """Every slice's record once the cluster stopped: each its own load, the
    members as they ended; the keys' count, the check's verdict and the
    error (they are the whole run's) on the last. None ran: one record,
    trial 1's, saying why."""
    slices = collected.measured.slices if collected.measured else ()
    if not slices:
        return (slice_record(job, collected, 1),)
    last = len(slices)
    before = replace(collected, counted=Counted(), judged=Judged(), error="")
    return tuple(
        slice_record(job, replace(collected if n == last else before, measured=Measured(load)), n)
        for n, load in enumerate(slices, 1)
    )


def _notes(job: DatabaseJob, c: Collected) -> tuple[str, ...]:
    w = job.db.workload
    notes = [
        job.kind.setup_note(job.db.flags, job.db.client, job.db.member_count),
        job.kind.load_note(w.clients, min(w.connections, w.clients)),
        load_hosts_note(c.measured.load_hosts if c.measured else ()),
        _load_phase_note(c.seeded.loaded),
        _warmup_note(w.warmup_requests),
        _faults_note(job),
        _search_note(job, c.measured.searched if c.measured else None),
        _slices_note(job),
        # how this kind's watchers work, where it shapes the figures
        (job.kind.watch_note or None) if w.WATCHES else None,
        job.kind.session_note(job.db.client) if w.session_ttl_s is not None else None,
    ]
    return tuple(n for n in notes if n)


def _slices_note(job: DatabaseJob) -> str | None:
    if job.turns is None:
        return None
    return (
        f"interleave: slices: each trial a slice of {job.turns.slice_s:g} s of load on one"
        " cluster, started once; every database's cluster up at once, their slices"
        " alternating in an order drawn at random each round"
    )


def _search_record(job: DatabaseJob, outcome: SearchOutcome | None) -> SearchRecord | None:
    search = job.search
    if search is None:
        return None
    probes: tuple[ProbeRecord, ...] = ()
    if outcome is not None:
        again = len(outcome.probes) if outcome.confirmed is not None else 0
        probes = tuple(
            _probe_record(i + 1, probe, load, again=i + 1 == again)
            for i, (probe, load) in enumerate(zip(outcome.probes, outcome.loads, strict=True))
        )
    return SearchRecord(
        slo_ms=search.slo_ms,
        percentile=search.percentile,
        hold_s=search.hold_s,
        start_rate=search.start_rate,
        precision=search.precision,
        time_budget_s=search.time_budget,
        probes=probes,
        maximum=outcome.maximum if outcome else None,
        failing=outcome.failing if outcome else None,
        stopped=outcome.stopped if outcome else "",
        chosen=None if outcome is None or outcome.chosen is None else outcome.chosen + 1,
        confirmed=outcome.confirmed if outcome else None,
    )


def _search_note(job: DatabaseJob, outcome: SearchOutcome | None) -> str | None:
    search = job.search
    if outcome is None or search is None or outcome.chosen is None:
        return None
    chosen = outcome.probes[outcome.chosen]
    which = (
        "the highest rate that passed"
        if outcome.maximum is not None
        else "the lowest rate tried; none passed"
    )
    return (
        f"{found(outcome, search)}; the latency and throughput rows are the"
        f" {chosen.offered:,.0f}/s probe's ({which}), every probe is in run.json's search"
    )


def _faults_note(job: DatabaseJob) -> str | None:
    if not job.faults:
        return None
    done = "; ".join(f.describe() for f in job.faults)
    return f"scheduled faults during the load: {done} (each as it happened: run.json faults)"


def _warmup_note(requests: int) -> str | None:
    if not requests:
        return None
    return f"{requests:,} warm-up requests ran before the load and are in no figure"


def _load_phase_note(loaded: LoadResult | None) -> str | None:
    if loaded is None:
        return None
    took = loaded.ended_unix - loaded.started_unix
    return (
        f"a load phase wrote {len(loaded.records):,} keys in {took:.1f} s before the"
        " load; it is in no figure"
    )


def load_hosts_note(hosts: Sequence[LoadHostRecord]) -> str | None:
    """The load hosts' shares, throughput, CPU and start skew in one note;
    a host whose engine was at its CPU limit is named first."""
    if not hosts:
        return None
    busy = [h for h in hosts if h.cpu_limited]
    parts = []
    for h in hosts:
        cpu = ""
        if h.engine_cpu_seconds is not None and h.ended_unix > h.started_unix:
            used = h.engine_cpu_seconds / (h.workers * (h.ended_unix - h.started_unix))
            cpu = f", engine CPU {used:.0%}"
            if h.cpu_wait_seconds:
                waited = h.cpu_wait_seconds / (h.workers * (h.ended_unix - h.started_unix))
                cpu += f" (+{waited:.0%} waiting for one)"
        parts.append(
            f"host {h.index} ({h.agent}) {sum(h.counts.values()):,} requests,"
            f" {h.throughput:,.0f} req/s{cpu}"
        )
    skews = [abs(h.start_skew_ms) for h in hosts if h.start_skew_ms is not None]
    offsets = max(abs(h.clock_offset_s) for h in hosts) * 1000.0
    text = (
        f"Load from {len(hosts)} hosts: {'; '.join(parts)}. Clock offsets up to"
        f" {offsets:,.1f} ms, corrected"
    )
    text += f"; worst start skew {max(skews):,.1f} ms." if skews else "."
    if busy:
        named = ", ".join(f"host {h.index} ({h.agent})" for h in busy)
        text = (
            f"{named} ran its engine at its CPU limit: the figures measure that client"
            f" as much as the database. " + text
        )
    return text


def _window(load: LoadResult | None) -> LoadWindow | None:
    if load is None:
        return None
    return LoadWindow(
        started_unix=load.started_unix,
        ended_unix=load.ended_unix,
        workers=load.workers,
        cpu_seconds=load.cpu_seconds,
        cpu_wait_seconds=load.cpu_wait_seconds,
        engine_cpu_seconds=load.engine_cpu_seconds,
        aborted=load.aborted,
        counts=load.records.counts(),
        counters=dict(load.counters),
        compactions=load.compactions,
        informers=load.informers,
        expirations=load.expirations,
    )


def _probe_record(number: int, probe: Probe, load: LoadResult, *, again: bool) -> ProbeRecord:
    window = _window(load)
    assert window is not None
    return ProbeRecord(
        number=number,
        offered=probe.offered,
        achieved=probe.achieved,
        latency_ms=probe.latency_ms,
        error_rate=probe.error_rate,
        trend_tau=probe.trend.tau,
        trend_p_value=probe.trend.p_value,
        trend_rise_ms=probe.trend.rise_ms,
        trend_median_ms=probe.trend.median_ms,
        trend_seconds=probe.trend.seconds,
        trend_end_ms=probe.trend.end_ms,
        engine_lag_ms=probe.engine_lag_ms,
        engine_busy=probe.engine_busy,
        client_bound=probe.client_bound,
        failures=probe.failures,
        load=window,
        again=again,
    )
