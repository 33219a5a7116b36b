"""The phases after a database's measured load: its keys counted against
what the loads wrote (:class:`Counted`), and the workload's ``check:``
judged (:class:`Judged`). Each returns what it found, so that the record
keeps it, and a separate call says whether it fails the run."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from dbtester.analyze.correctness import (
    FaultSpan,
    judge,
    judge_informers,
    judge_locks,
    judge_watch,
)
from dbtester.analyze.faults import windows
from dbtester.control.cluster import Cluster, running_members
from dbtester.control.job import DatabaseJob
from dbtester.control.measure import Measured, Seeded, Warmed
from dbtester.errors import DbtesterError
from dbtester.results import CorrectnessRecord, FaultRecord, Verification

__all__ = [
    "COUNT_RETRY_PAUSE_S",
    "COUNT_RETRY_S",
    "Counted",
    "Judged",
    "count",
    "judge_check",
    "verify",
    "violation",
]

#: how long counting the keys is retried (a cluster may be electing a leader)
COUNT_RETRY_S = 20.0
COUNT_RETRY_PAUSE_S = 0.5


@dataclass(frozen=True)
class Counted:
    """The keys in the database against what the loads wrote (None: not
    counted: the workload writes no keys to count, or no load ran), or why
    they could not be counted."""

    verification: Verification | None = None
    problem: str = ""


@dataclass(frozen=True)
class Judged:
    """The checked clients' or the watchers' verdict (None: no ``check:``)."""

    correctness: CorrectnessRecord | None = None


def count(
    job: DatabaseJob, cluster: Cluster, seeded: Seeded, warmed: Warmed, measured: Measured
) -> Counted:
    """Count the keys in the database against what the loads wrote: attempted,
    acknowledged, refused, unknown outcome, found. Never raises: a cluster
    that cannot be counted is said in ``problem`` instead (the load's own
    error, if it had one, is the one to report)."""
    if not job.db.workload.VERIFIED or measured.load is None:
        return Counted()
    try:
        found = _count_keys(job, cluster)
    except Exception as exc:
        problem = f"counting keys failed: {exc}"
        job.say(problem)
        return Counted(problem=problem)
    writes = _key_writes(job, seeded, warmed, measured)
    v = job.db.workload.account_keys(writes, found, measured.load.counters)
    job.say(
        f"{v.found:,} keys found; {v.attempted:,} writes attempted,"
        f" {v.acknowledged:,} acknowledged, {v.failed:,} refused,"
        f" {v.unknown:,} unknown outcome"
    )
    return Counted(v)


def verify(job: DatabaseJob, counted: Counted) -> None:
    """After writes, the keys in the database must match what was
    acknowledged: DbtesterError when they do not or could not be counted."""
    if counted.problem:
        raise job.failed(counted.problem)
    v = counted.verification
    if v is not None and not v.ok:
        raise job.failed(
            f"verification failed: {v.lost:,} acknowledged keys"
            f" lost, {v.unexpected:,} unexpected keys (found {v.found:,},"
            f" expected {v.expected_min:,}..{v.expected_max:,})"
        )


def _key_writes(
    job: DatabaseJob, seeded: Seeded, warmed: Warmed, measured: Measured
) -> Counter[str]:
    """The outcomes of the requests that create keys. The warm-up's are in
    the database too: every acknowledged one must be there as well. A
    mixed workload's keys are its load phase's (all acknowledged) and its
    inserts; its updates create none."""
    counts: Counter[str] = Counter()
    if seeded.loaded is not None:
        counts.update(seeded.loaded.records.counts())
    for run in (warmed.warmup, *measured.loads):
        if run is not None:
            counts.update(job.db.workload.key_writes(run.records).counts())
    return counts


def _count_keys(job: DatabaseJob, cluster: Cluster) -> int:
    """The kind's key count, asked again for up to COUNT_RETRY_S: right after
    a member died the cluster may still be electing a leader ("leader
    changed", a connection refused), which says nothing about the keys."""
    deadline = time.monotonic() + COUNT_RETRY_S
    settings = job.settings(cluster.endpoints, cluster.access)
    endpoints = settings.endpoints
    kind = job.kind
    while True:
        try:
            return kind.count_keys(
                replace(settings, endpoints=endpoints), job.db.workload.key_prefix
            )
        except PermissionError:
            raise  # refused: asking again is refused again
        except Exception as exc:
            if time.monotonic() >= deadline:
                raise
            members = len(cluster.clients)
            running = running_members(job, cluster)
            short = short_of_quorum(running, members, kind.quorum(members))
            if short:  # asking again cannot help
                raise DbtesterError(f"{short} ({exc})") from None
            time.sleep(COUNT_RETRY_PAUSE_S)
        # The next try asks the next member first: one a fault left down
        # answers nothing.
        endpoints = endpoints[1:] + endpoints[:1]


def short_of_quorum(running: int | None, members: int, quorum: int) -> str:
    """Why a cluster of ``members`` cannot answer while ``running`` of them
    run and it needs ``quorum`` ("" when it may, or the running members are
    unknown)."""
    if running is None or running >= quorum:
        return ""
    return (
        f"{running} of {members} member{'s' if members != 1 else ''} running, fewer than"
        f" the {quorum} it needs to answer"
    )


def judge_check(job: DatabaseJob, measured: Measured, faults: Sequence[FaultRecord]) -> Judged:
    """The workload's ``check:``: the checked clients' history held to
    linearizability, or the watchers' events to the watch guarantees, each
    violation placed among the fault windows; or the informers' copies to
    the objects at the end."""
    check, load = job.db.workload.judged_by, measured.load
    if check is None or load is None:
        return Judged()
    if check.model == "informer":
        return Judged(judge_informers(load.informers, on_violation=check.on_violation))
    if check.model == "lock":
        if load.lock_holds is None:
            return Judged()
        return Judged(judge_locks(load.lock_holds, on_violation=check.on_violation))
    spans = [
        FaultSpan(
            f"fault {w.number} ({w.describe()})",
            load.started_unix + w.start_s,
            None if w.end_s is None else load.started_unix + w.end_s,
        )
        for w in windows(faults, load.started_unix)
    ]
    if not check.runs_clients:
        if load.watch is None:
            return Judged()
        return Judged(judge_watch(load.watch, on_violation=check.on_violation, faults=spans))
    if load.check is None:
        return Judged()
    serializable = job.db.workload.read_consistency == "serializable"
    return Judged(
        judge(
            load.check,
            clients=check.clients,
            keys=check.keys,
            on_violation=check.on_violation,
            serializable=serializable,
            faults=spans,
        )
    )


def violation(job: DatabaseJob, judged: Judged) -> None:
    """DbtesterError when the check found a violation and the test case does
    not say to report it only."""
    check = job.db.workload.judged_by
    found = judged.correctness.violation if judged.correctness is not None else None
    if check is None or found is None or check.on_violation != "fail":
        return
    raise DbtesterError(
        f"{check.broken} {found.key}: {found.reason} (run.json's correctness has the details)"
    )
