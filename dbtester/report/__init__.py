"""Rendering: the ASCII/CSV table, the comparison, the SVG charts, the results
README and the interactive HTML report."""

from dbtester.report.charts import CHARTS, drawn, render_charts
from dbtester.report.comparison import headline, render_comparisons
from dbtester.report.interactive import render_html_report
from dbtester.report.readme import render_readme
from dbtester.report.table import format_value, render_csv, render_table

__all__ = [
    "CHARTS",
    "drawn",
    "format_value",
    "headline",
    "render_charts",
    "render_comparisons",
    "render_csv",
    "render_html_report",
    "render_readme",
    "render_table",
]
