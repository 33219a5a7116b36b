"""A history rendered: the table of runs x metrics per database and version,
and one trend chart per metric (x = the run's start, one line per database,
each run's 95% trial interval as an error bar).

``--out DIR`` writes::

    DIR/history.txt              the table
    DIR/history.csv              one row per run, database and metric
    DIR/charts/<metric>.svg      one trend chart per metric (with --changes,
                                 each shift a dashed line at its first run)
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt

from dbtester.history.changes import ChangePoint, Changes
from dbtester.history.query import History, RunFigures
from dbtester.report.charts import STYLE
from dbtester.report.spans import label_at
from dbtester.report.table import format_cell

__all__ = ["chart_name", "render_csv", "render_table", "write_outputs"]


def _cell(run: RunFigures, metric: str) -> str:
    found = run.estimate(metric)
    return "-" if found is None else format_cell(metric, found.mean, found)


def render_table(history: History, metrics: Sequence[str]) -> str:
    """Per database and version: one line per run, one column per metric."""
    blocks = []
    header = ["run", "started (UTC)", *metrics]
    for database in history.databases():
        runs = history.of(database)
        for version in dict.fromkeys(r.version for r in runs):
            rows = [
                [r.run_id, r.started.strftime("%Y-%m-%d %H:%M"), *(_cell(r, m) for m in metrics)]
                for r in runs
                if r.version == version
            ]
            blocks.append(f"{database} ({runs[0].kind} {version})\n" + _columns([header, *rows]))
    if not blocks:
        return f"no runs found under {history.source}\n"
    return "\n".join(blocks)


def _columns(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def render_csv(history: History, metrics: Sequence[str]) -> str:
    """One row per run, database and metric: mean, trials and interval half-width."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "run_id",
            "started_unix",
            "database",
            "kind",
            "version",
            "metric",
            "mean",
            "trials",
            "half_width",
        ]
    )
    for run in history.runs:
        for metric in metrics:
            found = run.estimate(metric)
            if found is not None:
                half = "" if found.half_width is None else repr(found.half_width)
                writer.writerow(
                    [
                        run.run_id,
                        repr(run.started_unix),
                        run.database,
                        run.kind,
                        run.version,
                        metric,
                        repr(found.mean),
                        found.n,
                        half,
                    ]
                )
    return out.getvalue()


def chart_name(metric: str) -> str:
    """A file name for ``metric`` ("Latency p99.9" -> "latency-p99_9")."""
    return re.sub(r"[^a-z0-9_-]+", "-", metric.lower().replace(".", "_")).strip("-")


def write_outputs(
    history: History, metrics: Sequence[str], out: Path, changes: Changes | None = None
) -> list[Path]:
    """The table, its CSV and one trend chart per metric, below ``out``
    (with ``changes``, each chart marks where its metric shifted)."""
    (out / "charts").mkdir(parents=True, exist_ok=True)
    written = [out / "history.txt", out / "history.csv"]
    written[0].write_text(render_table(history, metrics), encoding="utf-8")
    written[1].write_text(render_csv(history, metrics), encoding="utf-8")
    for metric in metrics:
        path = out / "charts" / f"{chart_name(metric)}.svg"
        shifts = [p for p in changes.points if p.change.metric.row == metric] if changes else []
        _trend(history, metric, path, shifts)
        written.append(path)
    return written


def _trend(history: History, metric: str, path: Path, shifts: Sequence[ChangePoint]) -> None:
    with plt.style.context(str(STYLE)):
        fig, ax = plt.subplots()
        try:
            for database in history.databases():
                # matplotlib's date numbers: days since 1970-01-01 UTC
                points = [
                    (r.started_unix / 86400, r.estimate(metric)) for r in history.of(database)
                ]
                shown = [(when, e) for when, e in points if e is not None]
                if not shown:
                    continue
                ax.errorbar(
                    [when for when, _ in shown],
                    [e.mean for _, e in shown],
                    yerr=[e.half_width or 0.0 for _, e in shown],
                    fmt="o-",
                    markersize=3,
                    capsize=2,
                    elinewidth=0.8,
                    label=database,
                )
            for shift in shifts:
                when = shift.run.started_unix / 86400
                ax.axvline(when, color="0.4", linestyle="--", linewidth=0.8)
                label_at(ax, when, f"{shift.database} {shift.change.change_pct:+.1f}%", "0.3")
            ax.set_title(f"{metric} across runs")
            ax.set_xlabel("Run started (UTC)")
            ax.set_ylabel(metric)
            ax.xaxis_date()  # x holds matplotlib's date numbers
            fig.autofmt_xdate()
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="best")
            fig.savefig(path)
        finally:
            plt.close(fig)
