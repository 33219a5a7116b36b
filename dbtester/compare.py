"""``dbtester compare DIR_A DIR_B``: the same databases in two results
directories, metric by metric — B's trials against A's with Welch's t-test —
and a verdict a CI job can gate on: a regression is a metric significantly
worse in B by more than a threshold."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dbtester.analyze import Compared, DatabaseAnalysis, analyze, compare_databases
from dbtester.analyze.stats import ALPHA, COMPARED_BY_DEFAULT, METRICS
from dbtester.errors import BadInputError, EnvironmentsDifferError
from dbtester.report.comparison import describe_change
from dbtester.report.table import format_cell
from dbtester.results import Machines, ResultsDir, RunResults

__all__ = ["Comparison", "check_metrics", "compare_directories", "describe_metrics"]


@dataclass(frozen=True)
class Comparison:
    a: Path
    b: Path
    threshold_pct: float
    compared: tuple[tuple[DatabaseAnalysis, DatabaseAnalysis, tuple[Compared, ...]], ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    #: how A's machine differs from B's (compared anyway: --across-environments)
    environments: tuple[str, ...] = ()
    #: databases whose version ran from different files in A and B (a rebuild)
    binaries: tuple[str, ...] = ()
    #: the significance level each row is judged at
    alpha: float = ALPHA

    def is_regression(self, item: Compared) -> bool:
        """Significantly worse in B by more than the threshold."""
        return item.change.worse and abs(item.change.change_pct) > self.threshold_pct

    @property
    def regressions(self) -> list[Compared]:
        return [c for _, _, found in self.compared for c in found if self.is_regression(c)]

    def render(self) -> str:
        lines = [f"A: {self.a}", f"B: {self.b}", ""]
        if self.environments:
            lines[2:2] = [
                "measured on different machines (compared anyway, --across-environments): "
                + "; ".join(self.environments)
            ]
        for a, b, found in self.compared:
            lines.append(f"{a.id}  ({len(a.trials)} trial(s) in A, {len(b.trials)} in B)")
            width = max((len(c.change.metric.row) for c in found), default=0)
            for item in found:
                c, row = item.change, item.change.metric.row
                before = format_cell(row, c.baseline.mean, c.baseline)
                after = format_cell(row, c.other.mean, c.other)
                lines.append(
                    f"  {row:<{width}}  {before:>22} -> {after:<22}"
                    f" {describe_change(c)}  {c.verdict}"
                )
            if not found:
                lines.append("  (no metric with values on both sides)")
        for side, ids in (("A", self.only_a), ("B", self.only_b)):
            if ids:
                lines.append(f"only in {side}: {', '.join(ids)}")
        lines.extend(f"note: {why}" for why in self.binaries)
        if self.alpha != ALPHA:
            lines.append(f"a verdict where p < {self.alpha:g}, ~ where not (--alpha)")
        if any(len(a.trials) < 2 or len(b.trials) < 2 for a, b, _ in self.compared):
            lines.append(
                "with one trial on a side a difference cannot be judged (?):"
                " run with `repeat: 5` to get verdicts"
            )
        return "\n".join(lines) + "\n"


def describe_metrics() -> list[tuple[str, str]]:
    """Every row ``compare`` and ``history`` can check, with which way is
    better and whether it is checked when no ``--metric`` is named."""
    described = []
    for name, metric in METRICS.items():
        words = f"{metric.better} is better"
        if name in COMPARED_BY_DEFAULT:
            words += "; checked by default"
        described.append((name, words))
    return described


def check_metrics(names: Sequence[str]) -> tuple[str, ...]:
    """The metrics to compare (the default set when none are named)."""
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise BadInputError(f"unknown metric {', '.join(unknown)}; allowed: {', '.join(METRICS)}")
    return tuple(names) or COMPARED_BY_DEFAULT


def compare_directories(
    a: Path,
    b: Path,
    *,
    threshold_pct: float = 5.0,
    metrics: Sequence[str] = (),
    across_environments: bool = False,
    alpha: float = ALPHA,
) -> Comparison:
    """Every database both directories hold (matched by id), B against A.
    EnvironmentsDifferError when they ran on different machines, unless
    ``across_environments``: a gate must not judge a change of hardware.
    Each row is significant where p < ``alpha``: a gate over k rows at 0.05
    each raises a false alarm on identical runs up to k x 5% of the time."""
    # unnamed: a search's and a watch load's rows where both directories
    # have them, then the defaults
    rows = check_metrics(metrics)
    results_a, results_b = ResultsDir(a).load(), ResultsDir(b).load()
    differ = _environments(results_a, results_b)
    if differ and not across_environments:
        raise EnvironmentsDifferError(
            f"{a} and {b} were measured on different machines ({'; '.join(differ)}):"
            " their difference would be the machines' as much as the databases', so no"
            " verdict is given. Compare runs from one machine, or pass"
            " --across-environments to compare them anyway"
        )
    first = {db.id: db for db in analyze(results_a).databases}
    second = {db.id: db for db in analyze(results_b).databases}
    both = [i for i in first if i in second]
    compared = tuple(
        (first[i], second[i], tuple(compare_databases(first[i], second[i], rows, alpha)))
        for i in both
    )
    return Comparison(
        a,
        b,
        threshold_pct,
        compared,
        tuple(i for i in first if i not in second),
        tuple(i for i in second if i not in first),
        tuple(differ),
        tuple(_binaries(results_a, results_b)),
        alpha,
    )


def _binaries(a: RunResults, b: RunResults) -> list[str]:
    """The databases whose one version ran from different files in A and B:
    the same version number built twice is not always the same program."""
    if a.summary is None or b.summary is None:
        return []
    theirs = {db.id: db for db in b.summary.databases}
    found = []
    for db in a.summary.databases:
        other = theirs.get(db.id)
        if (
            other is not None
            and db.version == other.version
            and db.binaries
            and other.binaries
            and set(db.binaries) != set(other.binaries)
        ):
            found.append(
                f"{db.id}: {db.kind} {db.version} ran from different files in A and B"
                f" (sha256 {', '.join(h[:12] for h in db.binaries)} against"
                f" {', '.join(h[:12] for h in other.binaries)}): a different build"
            )
    return found


def _environments(a: RunResults, b: RunResults) -> list[str]:
    """How the two runs' machines differ: the controllers' (the client), then
    each database's servers (nothing where either side is unknown)."""
    if a.summary is None or b.summary is None:
        return []
    found = [f"client {d}" for d in a.summary.environment.differences(b.summary.environment)]
    theirs = {db.id: db for db in b.summary.databases}
    for db in a.summary.databases:
        other = theirs.get(db.id)
        if other is not None:
            servers = Machines(servers=db.servers).differences(Machines(servers=other.servers))
            found += [f"{db.id} {d}" for d in servers]
    return found
