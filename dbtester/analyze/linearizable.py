"""Whether a history of reads and writes of registers is linearizable. Pure.

Each key is a register, checked on its own (linearizability is local: a
history is linearizable when each key's is). Every write stores a value no
other write stores, which makes the check polynomial: the algorithm is
Gibbons and Korach's for read/write registers with unique values (P. B.
Gibbons, E. Korach, "Testing shared memories", SIAM Journal on Computing
26(4), 1997). A write and the reads that returned its value form a
*cluster*; with ``f`` the earliest completion in it and ``s`` the latest
invocation, the cluster's *zone* is forward, ``[f, s]``, when ``f < s``,
else backward, ``[s, f]``. A history in which every read returns a written
value, never before that write was invoked, is linearizable exactly when no
two forward zones overlap and no backward zone lies inside a forward zone.
Sorting the zones makes that O(n log n) per key: no history is too large
to check in time, only (past ``MAX_OPERATIONS``) in memory.

Outcomes, as porcupine and etcd's robustness tests treat them: an
operation that *failed* did not take effect and is left out; a write whose
outcome is *unknown* (no reply: a timeout, a connection cut) may or may not
have taken effect, so it is invoked but never completes (a read of its
value shows it did; unread, it is left out, as it may have been applied
last); a read of unknown outcome returned nothing to check. The key's
initial value (``INITIAL``: absent) is written before the history begins.

Only certain violations are reported: times that are equal count in the
history's favour.

A serializable read may be stale by definition: it is not held to
linearizability but counted as stale when some write certainly came between
the write whose value it returned and the read (invoked after that write
completed, completed before the read was invoked).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "INITIAL",
    "MAX_OPERATIONS",
    "KeyCheck",
    "Operation",
    "Outcome",
    "Violation",
    "check_history",
]

#: the value a key holds before any write: absent
INITIAL = 0
#: a key with more operations is "not checked: too large" (about 100 bytes
#: each while checked)
MAX_OPERATIONS = 10_000_000

Outcome = Literal["ok", "failed", "unknown"]


@dataclass(frozen=True)
class Operation:
    """One read or write by one client, on the engine's one clock (ns)."""

    client: int
    key: int
    kind: Literal["read", "write"]
    #: the value written, or the value the read returned (INITIAL: absent)
    value: int
    invoked_ns: int
    #: None when the outcome is not "ok"
    completed_ns: int | None
    outcome: Outcome = "ok"
    #: a serializable read: may be stale, counted rather than judged
    serializable: bool = False
    #: the member that served it, as far as is known (None: unknown); said,
    #: not judged
    member: int | None = None


@dataclass(frozen=True)
class Violation:
    """Why a key's history is not linearizable, with the operations involved."""

    key: int
    reason: str
    operations: tuple[Operation, ...]


@dataclass(frozen=True)
class KeyCheck:
    """One key's verdict: linearizable, a violation, or not checked (why)."""

    key: int
    operations: int
    violation: Violation | None = None
    not_checked: str = ""
    #: serializable reads that returned a value already overwritten
    stale_reads: int = 0

    @property
    def linearizable(self) -> bool:
        return not self.not_checked and self.violation is None


@dataclass
class _Cluster:
    """A write (None: the initial value's) and the reads of its value."""

    write: Operation | None
    reads: list[Operation] = field(default_factory=list)

    def earliest_completion(self) -> float:
        if self.write is None:
            return -math.inf
        ends = [_completed(self.write), *(_completed(r) for r in self.reads)]
        return min(ends)

    def latest_invocation(self) -> float:
        starts = [r.invoked_ns for r in self.reads]
        if self.write is not None:
            starts.append(self.write.invoked_ns)
        return max(starts, default=-math.inf)

    def operations(self) -> tuple[Operation, ...]:
        return ((self.write,) if self.write else ()) + tuple(self.reads)


def _completed(op: Operation) -> float:
    """When ``op`` took effect at the latest (never, for an unknown write)."""
    return math.inf if op.completed_ns is None else op.completed_ns


def check_history(operations: Iterable[Operation]) -> list[KeyCheck]:
    """Each key's verdict, by key. ValueError if two writes of a key store
    one value (the check needs unique values: a bug in whoever wrote them)."""
    by_key: dict[int, list[Operation]] = {}
    for op in operations:
        by_key.setdefault(op.key, []).append(op)
    return [_check_key(key, by_key[key]) for key in sorted(by_key)]


def _check_key(key: int, operations: Sequence[Operation]) -> KeyCheck:
    if len(operations) > MAX_OPERATIONS:
        too_large = f"too large ({len(operations):,} operations)"
        return KeyCheck(key, len(operations), not_checked=too_large)
    judged = [op for op in operations if not op.serializable]
    clusters, violation = _clusters(key, judged)
    if violation is None:
        violation = _zones_violation(key, clusters)
    return KeyCheck(key, len(operations), violation, stale_reads=_stale(operations))


def _stale(operations: Sequence[Operation]) -> int:
    """How many serializable reads certainly returned an overwritten value."""
    writes = sorted(
        (op for op in operations if op.kind == "write" and op.outcome == "ok"),
        key=lambda op: op.invoked_ns,
    )
    invoked = [w.invoked_ns for w in writes]
    # soonest[i]: the earliest completion among writes[i:]
    soonest = [math.inf] * (len(writes) + 1)
    for i in range(len(writes) - 1, -1, -1):
        soonest[i] = min(soonest[i + 1], _completed(writes[i]))
    completion = {w.value: _completed(w) for w in writes}
    stale = 0
    for read in operations:
        if not (read.serializable and read.kind == "read" and read.outcome == "ok"):
            continue
        written = -math.inf if read.value == INITIAL else completion.get(read.value)
        if written is None:
            continue  # an unknown write's value: when it took effect is not known
        later = bisect.bisect_right(invoked, written)
        stale += soonest[later] < read.invoked_ns
    return stale


def _clusters(key: int, operations: Sequence[Operation]) -> tuple[list[_Cluster], Violation | None]:
    """Each write's cluster (the initial value's first), or the first read
    that no cluster can hold."""
    initial = _Cluster(None)
    clusters: dict[int, _Cluster] = {}
    failed: dict[int, Operation] = {}
    for op in operations:
        if op.kind != "write":
            continue
        if op.value == INITIAL:
            raise ValueError(f"key {key}: a write of the initial value {INITIAL}")
        if op.value in clusters or op.value in failed:
            raise ValueError(f"key {key}: value {op.value} written twice")
        if op.outcome == "failed":
            failed[op.value] = op
        else:
            clusters[op.value] = _Cluster(op)
    reads = sorted(
        (op for op in operations if op.kind == "read" and op.outcome == "ok"),
        key=lambda op: op.invoked_ns,
    )
    for read in reads:
        if read.value == INITIAL:
            initial.reads.append(read)
            continue
        cluster = clusters.get(read.value)
        if cluster is None:
            why = "a write that failed" if read.value in failed else "no write of the history"
            involved = (read, failed[read.value]) if read.value in failed else (read,)
            return [], Violation(key, f"a read returned value {read.value}, from {why}", involved)
        assert cluster.write is not None
        if _completed(read) < cluster.write.invoked_ns:
            return [], Violation(
                key,
                f"a read returned value {read.value} before the write of it began",
                (cluster.write, read),
            )
        cluster.reads.append(read)
    # an unknown write nobody read may have been applied last: no constraint
    kept = [
        c for c in clusters.values() if c.reads or (c.write and c.write.completed_ns is not None)
    ]
    return [initial, *kept], None


def _zones_violation(key: int, clusters: Sequence[_Cluster]) -> Violation | None:
    """Gibbons and Korach's two conditions on the clusters' zones."""
    forward: list[tuple[float, float, _Cluster]] = []
    backward: list[tuple[float, float, _Cluster]] = []
    for cluster in clusters:
        f, s = cluster.earliest_completion(), cluster.latest_invocation()
        if f < s:
            forward.append((f, s, cluster))
        else:
            backward.append((s, f, cluster))
    forward.sort(key=lambda zone: zone[0])
    for (_, end, one), (start, _, other) in itertools.pairwise(forward):
        if start < end:
            return _between(key, "two writes' zones overlap", one, other)
    starts = [zone[0] for zone in forward]
    for low, high, inner in backward:
        at = bisect.bisect_left(starts, low) - 1  # the forward zone starting before it
        if at >= 0 and high < forward[at][1]:
            return _between(key, "a write's zone lies inside another's", forward[at][2], inner)
    return None


def _between(key: int, what: str, one: _Cluster, other: _Cluster) -> Violation:
    """The violation between two clusters: every operation of both."""
    values = " and ".join(_named(c) for c in (one, other))
    return Violation(
        key,
        f"{what}: no order of {values} agrees with their reads and with real time",
        one.operations() + other.operations(),
    )


def _named(cluster: _Cluster) -> str:
    if cluster.write is None:
        return "the initial value"
    return f"value {cluster.write.value}"
