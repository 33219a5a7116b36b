"""The results README: title, description, notes, the table and every chart."""

from __future__ import annotations

from collections.abc import Sequence

from dbtester.report.catalog import STANDARD, Chart

__all__ = ["render_readme"]


def render_readme(
    title: str,
    description: str,
    table: str,
    notes: Sequence[str],
    machine: str,
    chart_base: str = "charts",
    *,
    comparison: str = "",
    charts: Sequence[Chart] = STANDARD,
    report: str = "",
    summary: Sequence[str] = (),
) -> str:
    """``machine`` is the environment in one line ('' for none); ``chart_base``
    prefixes chart links: relative locally, a bucket's public URL once published;
    ``comparison`` follows the table; ``charts`` are those drawn; ``report``
    links the interactive report ('' for none); ``summary``, what differed
    (:func:`dbtester.report.comparison.headline`), comes first."""
    lines = [f"# {title}", ""]
    if description.strip():
        lines += [description.strip(), ""]
    if summary:
        lines += ["## Summary", "", *(f"- {line}" for line in summary), ""]
    if machine:
        lines += [f"Machine — {machine}.", ""]
    if notes:
        lines += [f"- **Note**: {note}" for note in notes] + [""]
    if report:
        lines += [
            f"Interactive report: [{report}]({report}) — the table and every chart, with"
            " zoom, hover values and databases to switch off; it works offline.",
            "",
        ]
    lines += ["```", table.rstrip("\n"), "```", ""]
    if comparison:
        lines += ["```", comparison.rstrip("\n"), "```", ""]
    for chart in charts:
        lines += [f"## {chart.title}", "", f"![{chart.name}]({chart_base}/{chart.name}.svg)", ""]
    return "\n".join(lines)
