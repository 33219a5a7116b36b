"""Analysis: what a results directory holds -> figures (table rows, chart
series, notes). Pure: it reads nothing and writes nothing; ``dbtester.results``
loads the data and ``dbtester.report`` renders the figures."""

from __future__ import annotations

from dataclasses import dataclass

from dbtester import __version__
from dbtester.analyze.data import DatabaseData, prepare
from dbtester.analyze.figures import ROWS, Figures, compute, table_rows
from dbtester.results import DatabaseSummary, RunResults, RunSummary

__all__ = ["ROWS", "Analysis", "DatabaseData", "Figures", "analyze", "table_rows"]


@dataclass(frozen=True)
class Analysis:
    results: RunResults
    databases: tuple[DatabaseData, ...]
    figures: tuple[Figures, ...]

    @property
    def labels(self) -> list[str]:
        return [db.label for db in self.databases]

    @property
    def notes(self) -> list[str]:
        return [note for f in self.figures for note in f.notes]

    def summary(self, started: RunSummary) -> RunSummary:
        """``started`` (what the run wrote when it began) with the analysis added."""
        return started.model_copy(
            update={
                "analyzed_by": __version__,
                "title": self.results.case.title,
                "databases": tuple(
                    _database_summary(db, f)
                    for db, f in zip(self.databases, self.figures, strict=True)
                ),
            }
        )


def _database_summary(db: DatabaseData, figures: Figures) -> DatabaseSummary:
    record = db.record
    return DatabaseSummary(
        id=db.id,
        label=db.label,
        kind=record.kind,
        version=record.version,
        passed=record.passed,
        error=record.error or None,
        verification=record.verification,
        figures={row: figures.values.get(row) for row in table_rows([figures])},
        notes=tuple(figures.notes),
    )


def analyze(results: RunResults) -> Analysis:
    # The controller ran the load: its machine's cores are the client's.
    cores = results.summary.environment.cores if results.summary else None
    databases = tuple(prepare(db, cores) for db in results.databases)
    return Analysis(results, databases, tuple(compute(db) for db in databases))
