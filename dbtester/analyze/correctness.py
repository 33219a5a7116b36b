"""The verdict on a workload's ``check:``, as the record ``run.json`` keeps.
Pure.

Model linearizability: the checked clients' operations
(``check-history.npz``) held to linearizability key by key
(:mod:`dbtester.analyze.linearizable`). A read with the workload's
serializable consistency may be stale by definition: such reads are
counted, not judged. The first violation is written out with its
operations and the fault windows they overlap.

Model watch: each watcher of a watch load held to what a watch promises,
from the counts the engine kept (:class:`dbtester.results.WatchEvents`):
no acknowledged put's event missed, none received twice, none out of order
(etcd: by revision; ZooKeeper: by the zxid of the write each event is
matched to; Consul: by reply index), no revision split across replies.
Consul's coalesced changes arrive in one reply with others: seen, not
missed. Events of puts whose reply was lost are not expected, and not
judged.

Model informer: a Kubernetes load's informers, from what the engine found
(:class:`dbtester.results.InformerRecord`): an event at or below a revision
the informer had seen, a copy that was not exactly a fresh list at the end,
or an informer that never reached that list's revision, is a violation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dbtester.analyze.linearizable import KeyCheck, Operation, check_history
from dbtester.analyze.locks import lock_problems
from dbtester.results import (
    CheckedOperationRecord,
    CheckedOperations,
    CorrectnessRecord,
    InformerRecord,
    LockHolds,
    ViolationRecord,
    WatchCheckRecord,
    WatchEvents,
)
from dbtester.results.checked import ENDED_OK, NO_MEMBER

__all__ = ["FaultSpan", "describe", "judge", "judge_informers", "judge_locks", "judge_watch"]

#: a read of bytes no checked client wrote (the engine's GARBLED)
_GARBLED = 2**64 - 1


@dataclass(frozen=True)
class FaultSpan:
    """A fault window on the wall clock: what it was, from, to (None: open)."""

    label: str
    start_unix: float
    end_unix: float | None


def judge(
    history: CheckedOperations,
    *,
    clients: int,
    keys: int,
    on_violation: str,
    serializable: bool,
    faults: Sequence[FaultSpan] = (),
) -> CorrectnessRecord:
    """The verdict on ``history`` (reads serializable when ``serializable``)."""
    found = check_history(_operations(history, serializable))
    broken = [k for k in found if k.violation is not None]
    first = min(broken, key=_first_invoked, default=None)
    return CorrectnessRecord(
        model="linearizability",
        clients=clients,
        keys=keys,
        on_violation=on_violation,
        operations=len(history),
        linearizable_keys=sum(k.linearizable for k in found),
        violated_keys=len(broken),
        not_checked=tuple(f"c{k.key}: {k.not_checked}" for k in found if k.not_checked),
        stale_serializable_reads=sum(k.stale_reads for k in found),
        violation=_violation(first, faults) if first is not None else None,
    )


def _operations(history: CheckedOperations, serializable: bool) -> list[Operation]:
    ops = []
    for i in range(len(history)):
        ok = int(history.ended[i]) == ENDED_OK
        write = bool(history.write[i])
        value = int(history.value[i])
        ops.append(
            Operation(
                client=int(history.client[i]),
                key=int(history.key[i]),
                kind="write" if write else "read",
                # bytes no checked client wrote: a value no write of the history has
                value=value if value != _GARBLED else -1,
                invoked_ns=int(history.invoked_ns[i]),
                completed_ns=int(history.completed_ns[i]) if ok else None,
                outcome="ok" if ok else "unknown",
                serializable=serializable and not write,
                member=None if int(history.member[i]) == NO_MEMBER else int(history.member[i]),
            )
        )
    return ops


def _first_invoked(found: KeyCheck) -> int:
    assert found.violation is not None
    return min(op.invoked_ns for op in found.violation.operations)


def _violation(found: KeyCheck, faults: Sequence[FaultSpan]) -> ViolationRecord:
    assert found.violation is not None
    operations = tuple(_record(op) for op in found.violation.operations)
    start = min(op.invoked_unix for op in operations)
    end = max((op.completed_unix or np.inf) for op in operations)
    return ViolationRecord(
        key=f"c{found.key}",
        reason=found.violation.reason,
        operations=operations,
        during_fault=_overlapping(faults, start, end),
    )


def _overlapping(faults: Sequence[FaultSpan], start: float, end: float) -> str:
    """The fault windows that overlap ``start`` .. ``end`` ("" when none)."""
    return "; ".join(
        f.label
        for f in faults
        if f.start_unix <= end and (f.end_unix is None or f.end_unix >= start)
    )


def _record(op: Operation) -> CheckedOperationRecord:
    return CheckedOperationRecord(
        client=op.client,
        key=f"c{op.key}",
        kind=op.kind,
        value=op.value if op.value != -1 else _GARBLED,
        outcome=op.outcome,
        invoked_unix=op.invoked_ns / 1e9,
        completed_unix=None if op.completed_ns is None else op.completed_ns / 1e9,
        member=op.member,
    )


def judge_watch(
    watch: WatchEvents, *, on_violation: str, faults: Sequence[FaultSpan] = ()
) -> CorrectnessRecord:
    """The verdict on a watch load's watchers (model watch)."""
    missed = watch.missed()
    per_watcher = (
        missed + watch.duplicates.astype(np.int64) + watch.out_of_order.astype(np.int64)
    ) + watch.split.astype(np.int64)
    counts = WatchCheckRecord(
        watchers=watch.watchers,
        events_expected=watch.watchers * int(watch.acknowledged().sum()),
        missed=int(missed.sum()),
        duplicated=int(watch.duplicates.sum()),
        out_of_order=int(watch.out_of_order.sum()),
        split=int(watch.split.sum()),
        violated_watchers=tuple(int(w) for w in np.flatnonzero(per_watcher)),
    )
    return CorrectnessRecord(
        model="watch",
        clients=watch.watchers,
        keys=0,
        on_violation=on_violation,
        operations=counts.events_expected,
        linearizable_keys=0,
        violated_keys=0,
        violation=_watch_violation(watch, faults) if counts.violated_watchers else None,
        watch=counts,
    )


def _watch_violation(watch: WatchEvents, faults: Sequence[FaultSpan]) -> ViolationRecord:
    """The first violation in time: a missed event (when its put was sent) or
    a duplicate (when it arrived); else the first watcher that received
    events out of order or a split revision, which carry no time. A missed
    event was due from its put on and never came: every fault window not
    over before the put was sent is one it fell in."""
    timed: list[tuple[float, int, str, float]] = []  # (when, watcher, why, until)
    if (first := watch.first_missed()) is not None:
        watcher, offset = first
        sent = float(watch.sent_unix_s()[offset])
        timed.append(
            (
                sent,
                watcher,
                f"never received the event of put {offset} of the load, which was acknowledged",
                np.inf,
            )
        )
    if len(watch.duplicate_ms):
        at = int(np.argmin(watch.duplicate_ms))
        arrived = float(watch.duplicate_unix_s()[at])
        timed.append(
            (
                arrived,
                int(watch.duplicate_watcher[at]),
                "received an event it had received already",
                arrived,
            )
        )
    if timed:
        when, watcher, reason, until = min(timed)
        return ViolationRecord(
            key=f"watcher {watcher}",
            reason=reason,
            operations=(),
            during_fault=_overlapping(faults, when, until),
        )
    disorder = watch.out_of_order.astype(np.int64) + watch.split.astype(np.int64)
    watcher = int(np.flatnonzero(disorder)[0])
    said = []
    if n := int(watch.out_of_order[watcher]):
        said.append(f"{n:,} event{'s' if n != 1 else ''} out of order")
    if n := int(watch.split[watcher]):
        said.append(f"{n:,} repl{'ies' if n != 1 else 'y'} that split a revision")
    return ViolationRecord(
        key=f"watcher {watcher}", reason="received " + " and ".join(said), operations=()
    )


def judge_informers(informers: Sequence[InformerRecord], *, on_violation: str) -> CorrectnessRecord:
    """The verdict on a Kubernetes load's informers (model informer): the
    first informer found wrong, with its first problem."""
    wrong = [(n, i) for n, i in enumerate(informers) if i.problems or not i.converged]
    return CorrectnessRecord(
        model="informer",
        clients=len(informers),
        keys=0,
        on_violation=on_violation,
        operations=sum(i.events for i in informers),
        linearizable_keys=0,
        violated_keys=len(wrong),
        violation=_informer_violation(*wrong[0]) if wrong else None,
    )


def judge_locks(holds: LockHolds, *, on_violation: str) -> CorrectnessRecord:
    """The verdict on a lock load's acquisitions (model lock): the first
    lock held by two at once, or whose fencing token did not rise."""
    problems = lock_problems(holds)
    first = problems[0] if problems else None
    return CorrectnessRecord(
        model="lock",
        clients=len(np.unique(holds.locker)),
        keys=len(holds.locks()),
        on_violation=on_violation,
        operations=len(holds),
        linearizable_keys=len(holds.locks()) - len(problems),
        violated_keys=len(problems),
        violation=(
            ViolationRecord(key=f"lock {first.lock}", reason=first.reason, operations=())
            if first is not None
            else None
        ),
    )


def _informer_violation(number: int, informer: InformerRecord) -> ViolationRecord:
    if informer.problems:
        more = informer.problem_count - 1
        reason = informer.problems[0] + (f" (and {more:,} more)" if more else "")
    else:
        reason = "did not reach the objects' last revision within the request timeout"
    return ViolationRecord(key=f"informer {number}", reason=reason, operations=())


def describe(record: CorrectnessRecord) -> str:
    """One line for the table's CORRECTNESS row."""
    if record.model == "informer":
        if record.violation is not None:
            return f"VIOLATED ({record.violated_keys} of {record.clients} informers)"
        return f"informers held ({record.operations:,} events)"
    if record.model == "lock":
        if record.violation is not None:
            return f"VIOLATED ({record.violated_keys} of {record.keys} locks)"
        return f"locks held exclusively ({record.operations:,} acquisitions)"
    if record.watch is not None:
        watch = record.watch
        if watch.violated_watchers:
            return f"VIOLATED ({len(watch.violated_watchers)} of {watch.watchers} watchers)"
        return f"watch guarantees held ({watch.events_expected:,} events)"
    if record.violation is not None:
        return f"VIOLATED ({record.violated_keys} of {record.keys} keys)"
    if record.not_checked:
        return f"not checked: {'; '.join(record.not_checked)}"
    return f"linearizable ({record.operations:,} operations)"
