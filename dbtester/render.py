"""Turn a results directory's raw data into its table, charts, README, the
interactive report and the analysis part of ``result.json``: read
(``results``) -> compute (``analyze``) -> render (``report``) -> write
(``results``). ``dbtester run`` calls it when the databases are done and
``dbtester analyze DIR`` calls it on any saved run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dbtester.analyze import Analysis, analyze
from dbtester.report import (
    drawn,
    headline,
    render_comparisons,
    render_csv,
    render_readme,
    render_table,
)
from dbtester.results import Environment, ResultsDir, RunSummary

__all__ = ["Rendered", "render"]


@dataclass(frozen=True)
class Rendered:
    analysis: Analysis
    table: str
    comparison: str  # each database against the first ("" for one database)
    summary: RunSummary
    report: Path | None  # report.html (None when charts were not drawn)
    #: what differed, a line per database against the first (the README's
    #: and the report's opening summary)
    headline: tuple[str, ...] = ()


def render(directory: Path, *, charts: bool = True) -> Rendered:
    """Re-render everything derived in ``directory``; the raw data is only
    read. Without ``charts`` the SVG charts and report.html are not drawn:
    they are most of the time rendering takes (about 5 s of CPU for one
    database on a 2-core machine), and a gate needs only the figures."""
    store = ResultsDir(directory)
    analysis = analyze(store.load())
    labels, figures = analysis.labels, analysis.figures
    table = render_table(labels, figures, analysis.estimates)
    comparison = render_comparisons(analysis)
    layout = store.layout
    if charts:
        # imported here: matplotlib and Bokeh take about a second to load,
        # which a run without charts does not pay
        from dbtester.report.charts import render_charts

        render_charts(layout.chart, labels, figures)
    started = analysis.results.summary or RunSummary(
        run_id="", source="", started_unix=0.0, environment=Environment()
    )
    summary = analysis.summary(started)
    store.write_summary(summary)
    # Parquet beside the raw files, for `dbtester history` and other engines
    store.write_columnar(analysis.results, summary)
    case = analysis.results.case
    opening = tuple(headline(analysis))
    readme = render_readme(
        case.title,
        case.description,
        table,
        analysis.notes,
        summary.environment.summary(),
        chart_base=layout.relative(layout.charts),
        comparison=comparison,
        charts=drawn(figures) if charts else (),
        report=layout.relative(layout.report) if charts else "",
        summary=list(opening),
    )
    store.write_rendered(table, render_csv(labels, figures), readme, comparison)
    report = None
    if charts:
        from dbtester.report.interactive import render_html_report

        page = render_html_report(
            analysis, summary, test_case=store.read_case_text(), comparison=comparison
        )
        report = store.write_report(page)
    return Rendered(analysis, table, comparison, summary, report, opening)
