"""``dbtester history SOURCE --check``: each database's newest run against a
baseline — its previous N runs, or one named run — metric by metric, with the
trials statistics of :mod:`dbtester.analyze.stats`.

The baseline's sample is every trial value of its runs; the newest run's is
its own trials. With 2+ trials on both sides the test is Welch's t-test
(:func:`~dbtester.analyze.stats.compare`, as ``dbtester compare`` uses). A
nightly job often runs each database once: then the newest run's single value
is tested against the baseline's spread as a new observation would be (the
t statistic of ``(x - mean) / (sd * sqrt(1 + 1/n))`` with n - 1 degrees of
freedom, the two-sided prediction test) — so one-trial nightlies still gate.
A regression is a significant change for the worse beyond the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

from dbtester.analyze.stats import METRICS, Change, Metric, compare, estimate
from dbtester.errors import BadInputError
from dbtester.history.query import History, RunFigures

__all__ = ["Check", "Verdict", "check_history", "predict"]


@dataclass(frozen=True)
class Verdict:
    """One database's newest run against its baseline on one metric."""

    database: str
    newest: str  # run id
    baseline: tuple[str, ...]  # run ids
    change: Change

    def regression(self, threshold_pct: float) -> bool:
        return self.change.worse and abs(self.change.change_pct) > threshold_pct


@dataclass(frozen=True)
class Check:
    threshold_pct: float
    verdicts: tuple[Verdict, ...]
    skipped: tuple[str, ...]  # why a database could not be checked

    @property
    def regressions(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.regression(self.threshold_pct)]

    def render(self) -> str:
        lines = []
        for v in self.verdicts:
            c = v.change
            p = "" if c.p_value is None else f" p={c.p_value:.3f}"
            mark = "  REGRESSION" if v.regression(self.threshold_pct) else ""
            lines.append(
                f"{v.database} {c.metric.row}: {c.baseline.mean:,.4g} ({len(v.baseline)} run(s))"
                f" -> {c.other.mean:,.4g} in {v.newest}: {c.change_pct:+.1f}% {c.verdict}{p}{mark}"
            )
        lines.extend(f"not checked: {why}" for why in self.skipped)
        if any(v.change.p_value is None for v in self.verdicts):
            lines.append(
                "with one value on a side a change cannot be judged (?): use more baseline"
                " runs (--baseline-runs) or `repeat:` in the test case"
            )
        return "\n".join(lines) + "\n"


def predict(metric: Metric, baseline: Sequence[float], value: float) -> Change:
    """One new value against ``baseline``'s values (2+): the two-sided
    prediction test, as a :class:`Change` (no interval of a difference of means)."""
    a, b = estimate(baseline), estimate([value])
    change = (value - a.mean) * 100.0 / abs(a.mean) if a.mean else math.nan
    if a.n < 2:
        return Change(metric, a, b, change, None, None, None)
    spread = a.sd * math.sqrt(1 + 1 / a.n)
    if spread == 0:
        # a baseline that never varied: any difference is real
        return Change(metric, a, b, change, None, None, 1.0 if value == a.mean else 0.0)
    t = (value - a.mean) / spread
    p = float(2 * scipy_stats.t.sf(abs(t), a.n - 1))
    return Change(metric, a, b, change, None, None, p)


def check_history(
    history: History,
    metrics: Sequence[str],
    *,
    threshold_pct: float = 5.0,
    baseline_runs: int = 5,
    baseline_id: str | None = None,
) -> Check:
    """Each database's newest run against its baseline on every metric."""
    verdicts: list[Verdict] = []
    skipped: list[str] = []
    for database in history.databases():
        runs = history.of(database)
        base = _baseline(runs, baseline_runs, baseline_id)
        if not base:
            skipped.append(f"{database}: no baseline run before {runs[-1].run_id}")
            continue
        newest = runs[-1]
        for name in metrics:
            change = _change(METRICS[name], base, newest)
            if change is not None:
                verdicts.append(
                    Verdict(database, newest.run_id, tuple(r.run_id for r in base), change)
                )
    if baseline_id is not None and not any(r.run_id == baseline_id for r in history.runs):
        raise BadInputError(f"baseline run {baseline_id!r} is not in {history.source}")
    return Check(threshold_pct, tuple(verdicts), tuple(skipped))


def _baseline(runs: Sequence[RunFigures], count: int, baseline_id: str | None) -> list[RunFigures]:
    earlier = list(runs[:-1])
    if baseline_id is not None:
        return [r for r in earlier if r.run_id == baseline_id]
    return earlier[-count:]


def _change(metric: Metric, base: Sequence[RunFigures], newest: RunFigures) -> Change | None:
    before = [v for r in base for v in r.values.get(metric.row, ())]
    after = list(newest.values.get(metric.row, ()))
    if not before or not after:
        return None
    if len(after) == 1 and len(before) >= 2:
        return predict(metric, before, after[0])
    return compare(metric, before, after)
