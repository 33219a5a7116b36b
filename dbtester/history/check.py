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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

from dbtester.analyze.stats import METRICS, Change, Metric, compare, estimate
from dbtester.errors import BadInputError, EnvironmentsDifferError
from dbtester.history.query import History, RunFigures
from dbtester.history.source import Source
from dbtester.results import Machines, RunSummary

__all__ = ["Check", "MachinesOf", "Verdict", "check_history", "machines_of", "predict"]


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
    #: how the newest runs' machines differ from their baselines' (checked
    #: anyway: --across-environments)
    environments: tuple[str, ...] = ()

    @property
    def regressions(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.regression(self.threshold_pct)]

    def render(self) -> str:
        lines = [
            f"measured on different machines (checked anyway, --across-environments): {why}"
            for why in self.environments
        ]
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


#: the hardware a run's database was measured on (None: not known)
MachinesOf = Callable[[RunFigures], Machines | None]


def check_history(
    history: History,
    metrics: Sequence[str],
    *,
    threshold_pct: float = 5.0,
    baseline_runs: int = 5,
    baseline_id: str | None = None,
    machines: MachinesOf | None = None,
    across_environments: bool = False,
) -> Check:
    """Each database's newest run against its baseline on every metric.
    With ``machines``, EnvironmentsDifferError when a newest run was measured
    on other hardware than its baseline, unless ``across_environments``: the
    gate must not judge a change of machines."""
    verdicts: list[Verdict] = []
    skipped: list[str] = []
    differ: list[str] = []
    for database in history.databases():
        runs = history.of(database)
        base = _baseline(runs, baseline_runs, baseline_id)
        if not base:
            skipped.append(f"{database}: no baseline run before {runs[-1].run_id}")
            continue
        newest = runs[-1]
        if machines is not None:
            differ += _machines_differ(machines, base, newest)
        for name in metrics:
            change = _change(METRICS[name], base, newest)
            if change is not None:
                verdicts.append(
                    Verdict(database, newest.run_id, tuple(r.run_id for r in base), change)
                )
    if baseline_id is not None and not any(r.run_id == baseline_id for r in history.runs):
        raise BadInputError(f"baseline run {baseline_id!r} is not in {history.source}")
    if differ and not across_environments:
        raise EnvironmentsDifferError(
            f"in {history.source}, newest runs were measured on other machines than their"
            f" baselines ({'; '.join(differ)}): their difference would be the machines' as"
            " much as the databases', so no verdict is given. Keep a history per machine"
            " type, or pass --across-environments to check anyway"
        )
    return Check(threshold_pct, tuple(verdicts), tuple(skipped), tuple(differ))


def _machines_differ(
    machines: MachinesOf, base: Sequence[RunFigures], newest: RunFigures
) -> list[str]:
    """How ``newest``'s machines differ from each baseline run's, each
    difference once, naming the database and the runs."""
    mine = machines(newest)
    if mine is None:
        return []
    found: dict[str, list[str]] = {}
    for run in base:
        theirs = machines(run)
        for difference in theirs.differences(mine) if theirs is not None else ():
            found.setdefault(difference, []).append(run.run_id)
    return [
        f"{newest.database} {newest.run_id} against {', '.join(ids)}: {difference}"
        for difference, ids in found.items()
    ]


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


def machines_of(source: Source, history: History) -> MachinesOf:
    """Reads each run's result.json once, when first asked, for the
    machines its databases ran on."""
    summaries: dict[str, RunSummary | None] = {}

    def lookup(run: RunFigures) -> Machines | None:
        root = history.roots.get(run.run_id)
        if root is None:
            return None
        if root not in summaries:
            summaries[root] = source.summary(root)
        summary = summaries[root]
        if summary is None:
            return None
        found = next((db for db in summary.databases if db.id == run.database), None)
        return summary.machines(found) if found is not None else None

    return lookup
