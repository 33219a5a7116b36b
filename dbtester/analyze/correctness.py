"""The checked clients' verdict: their operations (``check-history.npz``)
held to linearizability key by key (:mod:`dbtester.analyze.linearizable`),
as the record ``run.json`` keeps. Pure.

A read with the workload's serializable consistency may be stale by
definition: such reads are counted, not judged. The first violation is
written out with its operations and the fault windows they overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dbtester.analyze.linearizable import KeyCheck, Operation, check_history
from dbtester.results import (
    CheckedOperationRecord,
    CheckedOperations,
    CorrectnessRecord,
    ViolationRecord,
)
from dbtester.results.checked import ENDED_OK

__all__ = ["FaultSpan", "describe", "judge"]

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
    overlapping = [
        f.label
        for f in faults
        if f.start_unix <= end and (f.end_unix is None or f.end_unix >= start)
    ]
    return ViolationRecord(
        key=f"c{found.key}",
        reason=found.violation.reason,
        operations=operations,
        during_fault="; ".join(overlapping),
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
    )


def describe(record: CorrectnessRecord) -> str:
    """One line for the table's CORRECTNESS row."""
    if record.violation is not None:
        return f"VIOLATED ({record.violated_keys} of {record.keys} keys)"
    if record.not_checked:
        return f"not checked: {'; '.join(record.not_checked)}"
    return f"linearizable ({record.operations:,} operations)"
