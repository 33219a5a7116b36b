"""``dbtester history SOURCE --changes``: where each metric's series of runs
shifted, instead of only whether the newest run differs from the few before.

Each database's runs are cut into series at every change of machines (a
new machine is a new baseline, as ``compare`` refuses to mix them), and
each metric's series of run means is segmented by PELT (``ruptures``) under
a penalty of ``3 sigma^2 ln n``, sigma being the run-to-run noise estimated from the
median absolute difference of neighbouring runs, so one shift does not
inflate it. Each boundary found is then tested, the runs before it against
the runs after it (up to the neighbouring boundaries), twice: Welch's t-test
(the means moved; its interval is the one reported) and the Mann-Whitney U
test (the runs as a whole moved, not one run dragging a mean), each below
:data:`ALPHA`, stricter than a single comparison's 0.05 because the search
picked the boundary that splits best. The weakest boundary that fails is
dropped and the others tested again against the merged segment, until all
pass. A segment has at least :data:`MIN_RUNS` runs, so a single noisy run
is never one (though it may make one of its own neighbours a boundary,
which then fails its test).

Measured (``python benchmarks/change_points.py``, 500 histories of 20 runs
with 2% noise): a change is named in 3.0% of histories of noise alone and
1.8% of those with one run 6 sigma off; a shift of 2 sigma is found at its
run (±1) in 70%, of 3 sigma in 95%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import ruptures
from scipy import stats as scipy_stats

from dbtester.analyze.stats import METRICS, Change, Metric, compare
from dbtester.history.check import MachinesOf
from dbtester.history.query import History, RunFigures

__all__ = ["ALPHA", "MIN_RUNS", "ChangePoint", "Changes", "find_changes", "noise", "series_of"]

#: the fewest runs on each side of a change point
MIN_RUNS = 3
#: both tests' level for a boundary to be named
ALPHA = 0.02
#: the penalty for each boundary, in units of sigma^2 ln n
PENALTY = 3.0
#: the median absolute difference of two normal draws is this many sigma
_MAD_OF_DIFFERENCES = 0.6745 * math.sqrt(2)


@dataclass(frozen=True)
class ChangePoint:
    """A shift in ``database``'s ``change.metric`` starting at ``run``."""

    database: str
    run: RunFigures  # the first run after the shift
    before: tuple[RunFigures, ...]  # the runs it is judged against
    after: tuple[RunFigures, ...]  # the runs after it, up to the next one
    change: Change  # of the runs' means, after against before
    #: the folder (in the source) that holds the run's result.json
    root: str = ""

    def regression(self, threshold_pct: float) -> bool:
        return self.change.worse and abs(self.change.change_pct) > threshold_pct

    def line(self) -> str:
        c = self.change
        interval = (
            ""
            if c.low_pct is None or c.high_pct is None
            else f" [{c.low_pct:+.1f}%, {c.high_pct:+.1f}%]"
        )
        p = "" if c.p_value is None else f" p={c.p_value:.3g}"
        where = f" in {self.root}" if self.root else ""
        return (
            f"{self.database} {c.metric.row}: {c.baseline.mean:,.4g} ({len(self.before)} runs)"
            f" -> {c.other.mean:,.4g} ({len(self.after)} runs), {c.change_pct:+.1f}%{interval}"
            f" {c.verdict}{p}, from run {self.run.run_id}"
            f" ({self.run.started:%Y-%m-%d %H:%M} UTC, {self.run.kind} {self.run.version}){where}"
        )


@dataclass(frozen=True)
class Changes:
    points: tuple[ChangePoint, ...]
    #: where a database's runs were cut because its machines changed
    cuts: tuple[str, ...] = ()

    def render(self) -> str:
        lines = ["change points:" if self.points else "change points: none found"]
        lines += [f"  {p.line()}" for p in self.points]
        lines += [f"  series cut: {why}" for why in self.cuts]
        return "\n".join(lines) + "\n"

    def recent(self, history: History, runs: int) -> list[ChangePoint]:
        """The change points that start in one of each database's newest ``runs``."""
        newest = {d: {r.run_id for r in history.of(d)[-runs:]} for d in history.databases()}
        return [p for p in self.points if p.run.run_id in newest[p.database]]

    def regressions(self, history: History, runs: int, threshold_pct: float) -> list[ChangePoint]:
        """The recent ones for the worse by more than ``threshold_pct``."""
        return [p for p in self.recent(history, runs) if p.regression(threshold_pct)]


def series_of(
    runs: Sequence[RunFigures], machines: MachinesOf | None
) -> tuple[list[list[RunFigures]], list[str]]:
    """``runs`` cut into series of consecutive runs on the same machines
    (unknown machines join the series they are in), and why each cut was made."""
    series: list[list[RunFigures]] = [[]]
    cuts: list[str] = []
    current = None
    for run in runs:
        found = machines(run) if machines is not None else None
        differ: list[str] = (
            found.differences(current) if found is not None and current is not None else []
        )
        if differ:
            cuts.append(f"{run.database} from {run.run_id}: {'; '.join(differ)}")
            series.append([])
        if found is not None:
            current = found
        series[-1].append(run)
    return series, cuts


def find_changes(
    history: History, metrics: Sequence[str], machines: MachinesOf | None = None
) -> Changes:
    """Every significant shift in each database's series of ``metrics``."""
    points: list[ChangePoint] = []
    cuts: list[str] = []
    for database in history.databases():
        series, cut = series_of(history.of(database), machines)
        cuts += cut
        for runs in series:
            for name in metrics:
                points += _changes(database, METRICS[name], runs, history)
    points.sort(key=lambda p: (p.database, p.run.started_unix, p.change.metric.row))
    return Changes(tuple(points), tuple(cuts))


def _changes(
    database: str, metric: Metric, runs: Sequence[RunFigures], history: History
) -> list[ChangePoint]:
    measured = [(r, e.mean) for r in runs if (e := r.estimate(metric.row)) is not None]
    values = np.array([v for _, v in measured], dtype=np.float64)
    bounds = _segments(values)
    while True:
        tested = [
            _test(metric, values, left, at, right)
            for left, at, right in zip(bounds, bounds[1:], bounds[2:], strict=False)
        ]
        weakest = max(range(len(tested)), key=lambda i: tested[i][1], default=None)
        if weakest is None or tested[weakest][1] < ALPHA:
            break
        # not a shift: the segments on both sides are one, and the
        # boundaries next to it are tested again against the merged one
        del bounds[weakest + 1]
    found = []
    for (left, at, right), (change, _) in zip(
        zip(bounds, bounds[1:], bounds[2:], strict=False), tested, strict=True
    ):
        run = measured[at][0]
        before = tuple(r for r, _ in measured[left:at])
        after = tuple(r for r, _ in measured[at:right])
        found.append(
            ChangePoint(database, run, before, after, change, history.roots.get(run.run_id, ""))
        )
    return found


def _test(
    metric: Metric, values: npt.NDArray[np.float64], left: int, at: int, right: int
) -> tuple[Change, float]:
    """The runs from ``left`` to ``at`` against those from ``at`` to
    ``right``: the change, and the larger of the two tests' p-values."""
    before, after = values[left:at], values[at:right]
    change = compare(metric, before.tolist(), after.tolist())
    ranks = scipy_stats.mannwhitneyu(before, after, alternative="two-sided")
    welch = change.p_value if change.p_value is not None else 1.0
    return change, max(welch, float(ranks.pvalue))


def noise(values: npt.NDArray[np.float64]) -> float:
    """The run-to-run standard deviation, from neighbouring runs' differences
    (a shift moves one difference, not their median)."""
    differences = np.abs(np.diff(values))
    sigma = float(np.median(differences)) / _MAD_OF_DIFFERENCES
    # runs that repeat a value exactly (a count) have no noise to scale by
    return sigma if sigma > 0 else float(np.std(values)) or 1e-12


def _segments(values: npt.NDArray[np.float64]) -> list[int]:
    """The segments' bounds: 0, each candidate change point, len(values)."""
    n = len(values)
    if n < 2 * MIN_RUNS:
        return [0, n]
    penalty = PENALTY * noise(values) ** 2 * math.log(n)
    model = ruptures.Pelt(model="l2", min_size=MIN_RUNS, jump=1).fit(values)
    breaks: list[int] = model.predict(pen=penalty)
    return [0, *breaks]
