"""The results README: title, description, notes, the table and every chart."""

from __future__ import annotations

from collections.abc import Sequence

from dbtester.report.charts import CHARTS

__all__ = ["render_readme"]


def render_readme(
    title: str,
    description: str,
    table: str,
    notes: Sequence[str],
    environment: dict[str, object],
    chart_base: str = "charts",
) -> str:
    """``chart_base`` prefixes chart links: relative locally, a bucket's public
    URL once published."""
    lines = [f"# {title}", ""]
    if description.strip():
        lines += [description.strip(), ""]
    if environment:
        summary = ", ".join(
            f"{k}: {v}"
            for k, v in environment.items()
            if k in ("cpu_model", "cores", "memory_gib", "kernel")
        )
        if summary:
            lines += [f"Machine — {summary}.", ""]
    if notes:
        lines += [f"- **Note**: {note}" for note in notes] + [""]
    lines += ["```", table.rstrip("\n"), "```", ""]
    for chart in CHARTS:
        lines += [f"## {chart.title}", "", f"![{chart.name}]({chart_base}/{chart.name}.svg)", ""]
    return "\n".join(lines)
