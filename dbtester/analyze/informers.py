"""What a ``type: kubernetes`` load's informers saw: how long the slowest
took to list the objects, their events' lag (a put's send to its event's
arrival at an informer, on the engine's one clock), what they did besides
(events, relists, resumed watches), and how many converged on exactly the
objects a fresh list found at the end. Pure."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dbtester.results import FigureValue, InformerLags, InformerRecord
from dbtester.workloads.kubernetes import INFORMER_ROWS

__all__ = ["informer_values", "p99_by_informer"]


def informer_values(
    informers: Sequence[InformerRecord], lags: InformerLags | None
) -> dict[str, FigureValue]:
    """INFORMER_ROWS' values (none without informers; no lag rows without a
    stamped event)."""
    if not informers:
        return {}
    synced, p50, p99, most, events, relists, resumes, converged = INFORMER_ROWS
    good = sum(1 for i in informers if i.converged and not i.problem_count)
    verdict = "OK" if good == len(informers) else "FAILED"
    values: dict[str, FigureValue] = {
        synced: max(i.synced_s for i in informers) * 1e3,
        events: sum(i.events for i in informers),
        relists: sum(i.relists for i in informers),
        resumes: sum(i.resumes for i in informers),
        converged: f"{good:,} / {len(informers):,} {verdict}",
    }
    if lags is not None and len(lags):
        lag_ms = lags.lag_ms()
        values[p50], values[p99] = (float(v) for v in np.percentile(lag_ms, (50, 99)))
        values[most] = float(lag_ms.max())
    return values


def p99_by_informer(lags: InformerLags) -> tuple[list[float], list[float]]:
    """Each informer's p99 event lag (ms), by informer number; an informer
    with no stamped event has no point."""
    numbers, p99s = [], []
    lag_ms = lags.lag_ms()
    for number in np.unique(lags.informer):
        numbers.append(float(number))
        p99s.append(float(np.percentile(lag_ms[lags.informer == number], 99)))
    return numbers, p99s
