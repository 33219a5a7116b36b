"""Rendering: the ASCII/CSV table, the SVG charts and the results README."""

from dbtester.report.charts import CHARTS, render_charts
from dbtester.report.readme import render_readme
from dbtester.report.table import format_value, render_csv, render_table

__all__ = ["CHARTS", "format_value", "render_charts", "render_csv", "render_readme", "render_table"]
