"""Several load hosts, one load: each host's share of it, and their records
merged back into one set. Pure.

:func:`split` gives load host *i* of *n* its share of every client step's
clients, connections and requests (as evenly as they go, the first hosts
taking the remainder), so the shares add up to the workload exactly. With
a rate, every host offers ``rate / n`` and starts ``i / rate`` seconds after
the common start: host *i* sends the requests the single schedule has due
at ``i``, ``i + n``, ``i + 2n``, ... of ``1 / rate`` steps, so the hosts'
schedules interleave into the one the workload describes, as connections'
do within one engine. Each host writes keys of its own: a write load's keys
follow on from the earlier hosts' (``first_key``), a mixed load's write ids
too (``write_id_base``).

:func:`merge` makes one :class:`~dbtester.results.Records` of the hosts':
every request kept (no percentile of percentiles), its due time moved from
the host's clock to the controller's by the host's measured offset, the
outcome codes mapped onto one table, in due order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dbtester.config.model import Workload, spread_problem
from dbtester.errors import DbtesterError
from dbtester.results import OK, Records

__all__ = ["Share", "merge", "split"]


@dataclass(frozen=True)
class Share:
    """What load host ``host`` runs of a workload."""

    host: int
    #: (clients, connections, requests) per client step, as
    #: :meth:`Workload.step_plan` gives the whole load's
    steps: tuple[tuple[int, int, int], ...]
    #: requests per second this host offers (0: as fast as it can)
    rate: float
    #: seconds after the common start this host's schedule begins
    start_offset_s: float
    #: the first key number a write load writes here
    first_key: int
    #: where a mixed load's write ids start here
    write_id_base: int

    @property
    def requests(self) -> int:
        return sum(requests for _, _, requests in self.steps)


def split(
    workload: Workload, hosts: int, *, first_key: int = 0, write_id_base: int = 0
) -> tuple[Share, ...]:
    """Each of ``hosts`` load hosts' share of ``workload``; DbtesterError
    when it cannot be shared (:func:`spread_problem`: a step with fewer
    clients or connections than there are hosts, a watch load...)."""
    if hosts < 1:
        raise ValueError(f"hosts must be at least 1, got {hosts}")
    if problem := spread_problem(workload, hosts):
        raise DbtesterError(problem)
    whole = workload.step_plan()
    per_host = [
        tuple(
            (_part(clients, hosts, i), _part(connections, hosts, i), _part(requests, hosts, i))
            for clients, connections, requests in whole
        )
        for i in range(hosts)
    ]
    shares = []
    done = 0
    for i, steps in enumerate(per_host):
        share = Share(
            host=i,
            steps=steps,
            rate=workload.rate / hosts if workload.rate else 0.0,
            start_offset_s=i / workload.rate if workload.rate else 0.0,
            first_key=first_key + done,
            write_id_base=write_id_base + done,
        )
        shares.append(share)
        done += share.requests
    return tuple(shares)


def _part(total: int, parts: int, i: int) -> int:
    """Part ``i`` of ``total`` shared among ``parts``: the first ones take
    the remainder, one each."""
    share, extra = divmod(total, parts)
    return share + (1 if i < extra else 0)


def merge(records: Sequence[Records], offsets_ns: Sequence[int]) -> Records:
    """One set of every host's records, in due order: host *i*'s due times
    less ``offsets_ns[i]`` (its clock's lead on the controller's), its
    outcome codes mapped onto one table (ok first)."""
    if len(records) != len(offsets_ns):
        raise ValueError(f"{len(records)} hosts' records, {len(offsets_ns)} clock offsets")
    codes = [OK]
    for host in records:
        codes += [c for c in host.codes if c not in codes]
    due = np.concatenate([r.due_ns - o for r, o in zip(records, offsets_ns, strict=True)])
    code = np.concatenate(
        [np.array([codes.index(c) for c in r.codes], np.uint8)[r.code] for r in records]
    )
    order = np.argsort(due, kind="stable")
    return Records(
        due[order],
        np.concatenate([r.latency_ns for r in records])[order],
        np.concatenate([r.service_ns for r in records])[order],
        code[order],
        np.concatenate([r.step for r in records])[order],
        codes,
        np.concatenate([r.ops for r in records])[order],
        np.concatenate([r.waited for r in records])[order],
    )
