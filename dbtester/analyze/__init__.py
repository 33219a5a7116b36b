"""Analysis: raw data of a results directory -> figures -> table, charts, README.

Reads only saved files, so ``dbtester analyze DIR`` re-renders any run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbtester import __version__
from dbtester.analyze.data import RunData, load_run
from dbtester.analyze.figures import ROWS, Figures, compute, table_rows
from dbtester.report import render_charts, render_csv, render_readme, render_table

__all__ = ["RESULT_SCHEMA", "ROWS", "Analysis", "analyze"]

RESULT_SCHEMA = 1


@dataclass
class Analysis:
    run: RunData
    figures: list[Figures]
    table: str


def analyze(directory: Path, *, chart_base: str = "charts") -> Analysis:
    run = load_run(directory)
    figures = [compute(db) for db in run.databases]
    labels = [db.label for db in run.databases]
    table = render_table(labels, figures)
    (directory / "summary.txt").write_text(table)
    (directory / "summary.csv").write_text(render_csv(labels, figures))
    render_charts(directory / "charts", labels, figures)
    result = _update_result(directory, run, figures)
    notes = [note for f in figures for note in f.notes]
    (directory / "README.md").write_text(
        render_readme(
            run.title, run.description, table, notes, result.get("environment", {}), chart_base
        )
    )
    return Analysis(run, figures, table)


def _update_result(directory: Path, run: RunData, figures: list[Figures]) -> dict[str, Any]:
    path = directory / "result.json"
    result: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    result.update(
        {
            "schema_version": RESULT_SCHEMA,
            "analyzed_by": __version__,
            "title": run.title,
            "databases": [
                {
                    "id": db.id,
                    "label": db.label,
                    "kind": db.record["database"]["kind"],
                    "version": db.record["database"]["version"],
                    "passed": not db.record.get("error"),
                    "error": db.record.get("error") or None,
                    "verification": db.record.get("verification"),
                    "figures": {row: f.values.get(row) for row in table_rows([f])},
                    "notes": f.notes,
                }
                for db, f in zip(run.databases, figures, strict=True)
            ],
        }
    )
    path.write_text(json.dumps(result, indent=2) + "\n")
    return result
