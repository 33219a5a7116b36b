"""Rendering: the ASCII/CSV table, the comparison, the results README, and
(drawn apart: they load matplotlib and Bokeh) the SVG charts in
``report.charts`` and the interactive HTML report in ``report.interactive``."""

from dbtester.report.catalog import CHARTS, drawn
from dbtester.report.comparison import headline, render_comparisons
from dbtester.report.readme import render_readme
from dbtester.report.table import format_value, render_csv, render_table

__all__ = [
    "CHARTS",
    "drawn",
    "format_value",
    "headline",
    "render_comparisons",
    "render_csv",
    "render_readme",
    "render_table",
]
