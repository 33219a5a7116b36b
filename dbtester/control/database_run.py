"""One database of a test case, start to finish, as a sequence of phases,
each taking the outputs it needs and returning its own (frozen)::

    connect -> start -> wait_serving         control.cluster: Agents, Started, Cluster
      -> seed -> warm                        control.measure: Seeded, Warmed
      -> measure_load or measure_search      control.measure: Measured
      -> count -> verify -> judge_check      control.verify: Counted, Judged
    -> stop (members stopped, files fetched) control.cluster: Stopped
    -> record                                control.record: Collected -> DatabaseRecord

Whatever happens (a failure, Ctrl-C), every member that was started is
stopped and its files are fetched; a failed database is archived on its
agents. :func:`run_database` returns the frozen :class:`DatabaseRecord` it
wrote, built from whichever phases ran; the heartbeat thread reports into a
:class:`~dbtester.control.cluster.Health` of its own, never into the record.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from dbtester.config.faults import Fault
from dbtester.config.model import DEFAULT_FAULT_RECOVERY_S, DatabaseSpec, Host
from dbtester.config.search import Search
from dbtester.control.access import endpoint_access, members_access
from dbtester.control.cluster import (
    Agents,
    Cluster,
    Health,
    Stopped,
    connect,
    heartbeats,
    start,
    stop,
    wait_serving,
)
from dbtester.control.job import DatabaseJob
from dbtester.control.measure import (
    Measured,
    Warmed,
    connect_load_hosts,
    fault_runner,
    load_problem,
    measure_load,
    measure_search,
    measure_slices,
    seed,
    warm,
)
from dbtester.control.record import Collected, record, slice_record, slice_records
from dbtester.control.slices import Turns
from dbtester.control.verify import count, judge_check, verify, violation
from dbtester.databases.base import Access
from dbtester.errors import DbtesterError
from dbtester.load import LoadResult
from dbtester.results import DatabaseRecord, ResultsDir
from dbtester.util.paths import link_or_copy
from dbtester.util.progress import Reporter

__all__ = ["run_database", "run_job"]


def run_database(
    db: DatabaseSpec,
    run_id: str,
    store: ResultsDir,
    scratch: Path,
    workers: int | None = None,
    reporter: Reporter | None = None,
    trial: int | None = None,
    faults: Sequence[Fault] = (),
    fault_recovery_s: float = DEFAULT_FAULT_RECOVERY_S,
    search: Search | None = None,
    load_hosts: Sequence[Host] = (),
    turns: Turns | None = None,
) -> tuple[DatabaseRecord, ...]:
    """Run ``db`` (``trial`` k of a repeated run: a fresh cluster of its own)
    and return the record written into ``store``; a failure is in its
    ``error``. ``faults`` are applied during the load, which fails when no
    request succeeds for ``fault_recovery_s``. With ``search`` the load is a
    search for the highest rate that meets its target, on this one cluster.
    With ``load_hosts`` their agents share the measured load. With
    ``turns`` its measured load comes in slices (interleave: slices): a
    record for each. KeyboardInterrupt propagates once the partial record
    is written."""
    job = DatabaseJob(
        db,
        run_id,
        store,
        scratch if trial is None else scratch / f"trial-{trial}",
        reporter or Reporter(),
        workers,
        trial,
        tuple(faults),
        fault_recovery_s,
        search,
        tuple(load_hosts),
        turns,
    )
    return run_job(job)


def run_job(job: DatabaseJob) -> tuple[DatabaseRecord, ...]:
    """Run ``job``'s phases; the record is always written, also on Ctrl-C
    (with slices, one per slice). Its error is the first failure's; else
    the stop's problem."""
    job.out.root.mkdir(parents=True, exist_ok=True)
    trail = _Trail(Collected(started_unix=time.time()))
    error = ""
    try:
        _phases(job, trail)
    except DbtesterError as exc:
        error = str(exc)
    except KeyboardInterrupt:
        error = "interrupted (Ctrl-C)"
        raise
    finally:
        collected = replace(trail.collected, error=error or trail.collected.error)
        if job.turns is None:
            results: tuple[DatabaseRecord, ...] = (record(job, collected),)
        else:
            results = slice_records(job, collected)
            _share_member_files(job, len(results))
        for result in results:
            job.store.write_record(result)
    # Every request's record and watch event is saved now and the phases'
    # outputs go with this frame: the next database and the analysis (which
    # reads them from disk) do not find them held here too (a watch load's
    # 10^7 events: 300 MB).
    return results


def _share_member_files(job: DatabaseJob, slices: int) -> None:
    """The members' samples, fetched once into ``<db-id>/``, in every
    slice's directory too: each slice's analysis reads the seconds of its
    own load from them (linked where the file system allows)."""
    whole = job.out
    files = [path for _, path in whole.server_metric_files()]
    files += [path for _, _, path in whole.companion_metric_files()]
    for number in range(1, slices + 1):
        into = job.store.database(job.db.id, number).root
        into.mkdir(parents=True, exist_ok=True)
        for path in files:
            link_or_copy(path, into / path.name)


class _Trail:
    """The phases' outputs so far, one frozen :class:`Collected` replaced as
    each phase returns: what the record is built from, also when a later
    phase failed or Ctrl-C came. The run's only mutable state; no phase
    sees it."""

    def __init__(self, collected: Collected) -> None:
        self.collected = collected


def _phases(job: DatabaseJob, trail: _Trail) -> None:
    """The cluster's phases around the load's: a test case's own endpoints
    need neither start nor stop."""
    if job.db.endpoints:
        cluster = Cluster(endpoints=tuple(job.db.endpoints), access=endpoint_access(job.db))
        trail.collected = replace(trail.collected, endpoints=cluster.endpoints)
        _on_cluster(job, cluster, trail)
        return
    with ExitStack() as stack:
        agents = connect(job, stack)
        trail.collected = replace(trail.collected, members=agents.members)
        if agents.failure is not None:
            raise agents.failure
        health = Health()
        # Heartbeats cover the stop too: stopping and fetching member by member
        # must not let a later member's agent watchdog fire.
        with heartbeats(job, agents.clients, health):
            stopped = _on_agents(job, agents, health, trail)
        if health.problem and not stopped.problem:
            raise job.failed(health.problem)


def _on_agents(job: DatabaseJob, agents: Agents, health: Health, trail: _Trail) -> Stopped:
    """Start the members, wait until they serve, run the load's phases;
    whatever happens, stop every member (a failed database's data is
    archived on its agents)."""
    tls = members_access(job.db, agents.peers, job.scratch / f"{job.db.id}-tls")
    cluster = Cluster((), agents.members, agents.peers, agents.clients, health, tls.access)
    failed = False
    try:
        started = start(job, agents, tls)
        cluster = replace(cluster, members=started.members)
        trail.collected = replace(trail.collected, members=started.members)
        if started.failure is not None:
            raise started.failure
        cluster = replace(cluster, endpoints=tuple(p.address("client") for p in agents.peers))
        trail.collected = replace(trail.collected, endpoints=cluster.endpoints)
        # Before its user exists, the cluster answers anyone.
        wait_serving(job, replace(cluster, access=Access(tls=tls.access.tls)))
        if job.db.auth is not None:
            job.say("setting up its user and turning authentication on")
            job.kind.create_user(agents.peers, tls.access)
        _on_cluster(job, cluster, trail)
    except BaseException:
        failed = True
        raise
    finally:
        stopped = stop(job, cluster, failed=failed)
        trail.collected = replace(trail.collected, members=stopped.members, error=stopped.problem)
    return stopped


def _on_cluster(job: DatabaseJob, cluster: Cluster, trail: _Trail) -> None:
    """The phases on a serving cluster: seed, warm up, measure, count,
    verify, judge."""
    seeded = seed(job, cluster)
    trail.collected = replace(trail.collected, seeded=seeded)
    warmed = warm(job, cluster)
    trail.collected = replace(trail.collected, warmed=warmed)
    measured = _measure(job, cluster, warmed, trail)
    trail.collected = replace(trail.collected, measured=measured)
    faults = trail.collected.faults
    problem = load_problem(job, cluster, measured, faults)
    # Account for every write even when the load stopped early: what was
    # lost matters most when something went wrong.
    counted = count(job, cluster, seeded, warmed, measured)
    trail.collected = replace(trail.collected, counted=counted)
    if problem:
        raise DbtesterError(problem)
    verify(job, counted)
    judged = judge_check(job, measured, faults)
    trail.collected = replace(trail.collected, judged=judged)
    violation(job, judged)


def _measure(job: DatabaseJob, cluster: Cluster, warmed: Warmed, trail: _Trail) -> Measured:
    """The search, the slices, or the measured load with the fault schedule
    beside it (its records kept whatever happens to the load)."""
    if job.search is not None:
        return measure_search(job, cluster, warmed, job.search)
    if job.turns is not None:

        def keep(number: int, load: LoadResult) -> None:
            # written at once: repeat: auto's look reads the slices so far
            so_far = replace(trail.collected, measured=Measured(load))
            job.store.write_record(slice_record(job, so_far, number))

        sliced = measure_slices(job, cluster, warmed, job.turns, keep)
        trail.collected = replace(trail.collected, measured=sliced)
        return sliced
    with ExitStack() as stack:
        hosts = connect_load_hosts(job, stack)
        runner = fault_runner(job, cluster)
        runner.start()
        measured: Measured | None = None
        try:
            measured = measure_load(job, cluster, warmed, hosts, runner)
            return measured
        finally:
            load = measured.load if measured is not None else None
            expired = load.session_expiries if load is not None else ()
            trail.collected = replace(trail.collected, faults=runner.stop(expired))
