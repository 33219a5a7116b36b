"""Analysis: what a results directory holds -> figures (table rows, chart
series, notes, comparisons). Pure: it reads nothing and writes nothing;
``dbtester.results`` loads the data and ``dbtester.report`` renders the figures."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from dbtester import __version__
from dbtester.analyze.data import DatabaseData, prepare
from dbtester.analyze.figures import ROWS, Figures, compute, table_rows
from dbtester.analyze.stats import (
    ALPHA,
    COMPARED_BY_DEFAULT,
    METRICS,
    Change,
    Estimate,
    compare,
)
from dbtester.analyze.steps import add_steps
from dbtester.analyze.trials import add_trend, combine
from dbtester.results import (
    ComparisonRecord,
    DatabaseResults,
    DatabaseSummary,
    Environment,
    Machines,
    RunResults,
    RunSummary,
)

__all__ = [
    "ROWS",
    "Analysis",
    "Compared",
    "DatabaseAnalysis",
    "DatabaseData",
    "Figures",
    "analyze",
    "compare_databases",
    "table_rows",
]


@dataclass(frozen=True)
class DatabaseAnalysis:
    """One column: a database's trials and what they add up to."""

    id: str
    label: str
    trials: tuple[DatabaseData, ...]
    trial_figures: tuple[Figures, ...]
    figures: Figures  # the one trial's, or the trials' means
    estimates: dict[str, Estimate]  # numeric rows, with 2+ trials

    @property
    def passed(self) -> bool:
        return all(t.record.passed for t in self.trials)

    def values(self, row: str) -> list[float]:
        """``row`` in every trial that has it, as numbers."""
        return list(self.by_trial(row).values())

    def by_trial(self, row: str) -> dict[int, float]:
        """``row`` by trial number, in the trials that have it."""
        pairs = zip(self.trials, self.trial_figures, strict=True)
        found = ((t.trial, f.values.get(row)) for t, f in pairs)
        return {trial: float(v) for trial, v in found if isinstance(v, int | float)}

    @property
    def sliced(self) -> bool:
        """Its trials were slices (interleave: slices): trial k ran in round k."""
        return bool(self.trials) and all(t.record.slice_s is not None for t in self.trials)


@dataclass(frozen=True)
class Compared:
    """``database`` against ``baseline`` on one metric."""

    baseline: str  # database ids
    database: str
    change: Change

    def record(self) -> ComparisonRecord:
        c = self.change
        return ComparisonRecord(
            baseline=self.baseline,
            database=self.database,
            row=c.metric.row,
            change_pct=_finite(c.change_pct),
            low_pct=c.low_pct,
            high_pct=c.high_pct,
            p_value=c.p_value,
            verdict=c.verdict,
            paired=c.paired,
        )


@dataclass(frozen=True)
class Analysis:
    results: RunResults
    databases: tuple[DatabaseAnalysis, ...]
    comparisons: tuple[Compared, ...]

    @property
    def labels(self) -> list[str]:
        return [db.label for db in self.databases]

    @property
    def figures(self) -> tuple[Figures, ...]:
        return tuple(db.figures for db in self.databases)

    @property
    def estimates(self) -> tuple[dict[str, Estimate], ...]:
        return tuple(db.estimates for db in self.databases)

    @property
    def repeat(self) -> int:
        """The most trials any database has."""
        return max((len(db.trials) for db in self.databases), default=1)

    @property
    def notes(self) -> list[str]:
        return [note for db in self.databases for note in db.figures.notes]

    def summary(self, started: RunSummary) -> RunSummary:
        """``started`` (what the run wrote when it began) with the analysis added."""
        return started.model_copy(
            update={
                "analyzed_by": __version__,
                "title": self.results.case.title,
                "repeat": self.repeat,
                "databases": tuple(_database_summary(db) for db in self.databases),
                "comparisons": tuple(c.record() for c in self.comparisons),
            }
        )


T = TypeVar("T")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _database_summary(db: DatabaseAnalysis) -> DatabaseSummary:
    record = db.trials[0].record
    rows = table_rows([db.figures])
    several = len(db.trials) > 1
    return DatabaseSummary(
        id=db.id,
        label=db.label,
        kind=record.kind,
        version=record.version,
        passed=db.passed,
        error=next((t.record.error for t in db.trials if t.record.error), None),
        verification=None if several else record.verification,
        figures={row: db.figures.values.get(row) for row in rows},
        notes=tuple(db.figures.notes),
        trials=len(db.trials),
        intervals={
            row: e.half_width for row, e in db.estimates.items() if e.half_width is not None
        },
        trial_figures=tuple(dict(f.values) for f in db.trial_figures) if several else (),
        faults=tuple(db.figures.faults),
        servers=_servers(db),
        binaries=_distinct(
            m.binary_sha256 for t in db.trials for m in t.record.members if m.binary_sha256
        ),
    )


def _distinct(items: Iterable[T]) -> tuple[T, ...]:
    """Each item once, in the order first seen."""
    return tuple(dict.fromkeys(items))


def _database(db: DatabaseResults, cores: int | None) -> DatabaseAnalysis:
    trials = tuple(prepare(db.id, db.label, t, cores) for t in db.trials)
    figures = tuple(_figures(t) for t in trials)
    combined, estimates = combine(figures, [t.trial for t in trials])
    if len(trials) > 1:
        add_trend(db.label, figures, [t.load_start for t in trials], combined)
    return DatabaseAnalysis(db.id, db.label, trials, figures, combined, estimates)


def _figures(data: DatabaseData) -> Figures:
    """One trial's figures, with its client steps' (client_steps runs)."""
    figures = compute(data)
    add_steps(data, figures)
    return figures


def compare_databases(
    baseline: DatabaseAnalysis,
    other: DatabaseAnalysis,
    metrics: Sequence[str] = COMPARED_BY_DEFAULT,
    alpha: float = ALPHA,
    *,
    paired: bool = False,
) -> list[Compared]:
    """``other`` against ``baseline`` on each metric both have values for
    (by default COMPARED_BY_DEFAULT: a search's rows, where both searched, a
    watch load's, where both watched, Kubernetes traffic's, where both ran
    it, and DEFAULT_METRICS), significant
    where p < ``alpha``. ``paired``: trial k of each ran in round k of one
    run's slices, and only the rounds both have a value in are compared."""
    found = []
    for row in metrics:
        if paired:
            mine, theirs = baseline.by_trial(row), other.by_trial(row)
            rounds = sorted(mine.keys() & theirs.keys())
            a, b = [mine[k] for k in rounds], [theirs[k] for k in rounds]
        else:
            a, b = baseline.values(row), other.values(row)
        if a and b:
            change = compare(METRICS[row], a, b, alpha, paired=paired)
            found.append(Compared(baseline.id, other.id, change))
    return found


def analyze(results: RunResults) -> Analysis:
    # The controller ran the load: its machine's cores are the client's.
    cores = results.summary.environment.cores if results.summary else None
    databases = tuple(_database(db, cores) for db in results.databases)
    comparisons = tuple(
        c
        for db in databases[1:]
        for c in compare_databases(databases[0], db, paired=databases[0].sliced and db.sliced)
    )
    for db in databases[1:]:
        _note_other_machines(databases[0], db)
    _note_slow_trials(databases)
    return Analysis(results, databases, comparisons)


#: a trial whose client machine ran this much slower than the run's median
#: trial is named: its figures are partly the machine's
SLOW_TRIAL = 0.10


def _note_slow_trials(databases: Sequence[DatabaseAnalysis]) -> None:
    """Name each trial that ran while the client machine was markedly slower
    (HOST-SPEED) than in the run's other trials, all databases together: the
    machine is the one thing they share."""
    speeds = [
        (db, trial.trial, float(value))
        for db in databases
        for trial, figures in zip(db.trials, db.trial_figures, strict=True)
        if isinstance(value := figures.values.get("HOST-SPEED"), int | float)
    ]
    if len(speeds) < 3:
        return
    median = statistics.median(speed for _, _, speed in speeds)
    for db, trial, speed in speeds:
        if speed < (1 - SLOW_TRIAL) * median:
            db.figures.notes.append(
                f"{db.label}: trial {trial} ran while the client machine was"
                f" {1 - speed / median:.0%} slower than in the run's median trial"
                " (HOST-SPEED: slower cores, or more contention for them), which alone"
                " can lower its throughput"
            )


def _note_other_machines(first: DatabaseAnalysis, db: DatabaseAnalysis) -> None:
    """A database whose members ran on other hardware than the first's is
    compared with it all the same (the test case chose its hosts), but the
    table says so: the difference is the machines' as much as the databases'."""
    differ = Machines(servers=_servers(first)).differences(Machines(servers=_servers(db)))
    if differ:
        db.figures.notes.append(
            f"{db.label}: its members ran on other machines than {first.label}'s"
            f" ({'; '.join(differ)}), so its comparison with it measures the machines too"
        )


def _servers(db: DatabaseAnalysis) -> tuple[Environment, ...]:
    """The hardware of its members' hosts, each distinct one once."""
    return _distinct(m.machine.hardware() for t in db.trials for m in t.record.members if m.machine)
