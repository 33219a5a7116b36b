"""The combined table, formatted as the original dbtester published it
(right-aligned, thousands separators, units per row) — and as CSV."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence

from dbtester.analyze.figures import (
    CV_ROW,
    TREND_ROW,
    Figures,
    table_rows,
    unoperated,
    unstepped,
)
from dbtester.analyze.stats import Estimate

__all__ = ["format_cell", "format_value", "render_csv", "render_table"]

NO_DATA = "-"


def human_bytes(value: float) -> str:
    """SI units, one decimal below 10 ('4.9 GB', '252 MB'), as the reference tables."""
    units = ("B", "kB", "MB", "GB", "TB", "PB")
    size = float(value)
    for unit in units:
        if size < 1000 or unit == units[-1]:
            if unit == "B":
                return f"{size:.0f} B"
            return f"{size:.1f} {unit}" if size < 10 else f"{size:.0f} {unit}"
        size /= 1000
    raise AssertionError


#: rows shown in one fixed format, by name
_FORMATS = {
    CV_ROW: "{:.1f} %",
    TREND_ROW: "{:+.2f} %/min",
    "HOST-SPEED-CV": "{:.1f} %",
    "HOST-SPEED": "{:,.0f} probes/s",
    "TOTAL-SECONDS": "{:.4f} sec",
    "FASTEST-LATENCY": "{:.4f} ms",
    "AVG-LATENCY": "{:.4f} ms",
    "SLOWEST-LATENCY": "{:.4f} ms",
    "LATENCY-AT-MAX-SUSTAINABLE": "{:.4f} ms",
    "WATCH-LATENCY-MAX": "{:.4f} ms",
    "WATCH-EVENTS-PER-SEC": "{:,.0f} events/sec",
    "WAIT-FAIRNESS": "{:.2f}x the mean wait",
    "CLIENT-CPU-SECONDS-PER-10K-REQUESTS": "{:.3f} s",
    "SCHEDULE-LAG p50": "{:.3f} ms",
    "SCHEDULE-LAG p99": "{:.3f} ms",
}


def format_value(row: str, value: float | int | str | None) -> str:
    if value is None:
        return NO_DATA
    if isinstance(value, str):
        return value
    if stepped := unstepped(row):  # CLIENTS-<n>-<row>: as <row>
        row = stepped[1]
    if operated := unoperated(row):  # READ-Latency p50 and the like: as Latency p50
        row = operated[1]
    # FAULT-<k>-..., and compactions' (COMPACTION-SECONDS-MAX, -P99-DURING-MS, ...)
    if row.startswith(("FAULT-", "COMPACTION-", "INFORMER-", "HANDOVER-")) and row.endswith(
        ("-SECONDS", "-SECONDS-MAX", "-MS")
    ):
        return f"{value:.2f} {'ms' if row.endswith('-MS') else 's'}"
    if row in _FORMATS:
        return _FORMATS[row].format(value)
    if row.endswith("THROUGHPUT"):
        return f"{value:,.0f} req/sec"
    if row.startswith(("Latency p", "WATCH-LATENCY p")) or row == "Latency max":
        return f"{value:.6f} ms"
    if row.endswith("CPU-USAGE"):
        return f"{value:.2f} %"
    if any(word in row for word in ("NETWORK", "MEMORY", "DISK-SPACE", "DB-SIZE")):
        return human_bytes(value)
    return f"{value:,.0f}"


def format_cell(row: str, value: float | int | str | None, found: Estimate | None) -> str:
    """The value, and with 2+ trials the 95% interval's half-width in % of it."""
    text = format_value(row, value)
    relative = found.relative_half_width if found is not None else None
    if relative is None or value is None:
        return text
    return f"{text} ±{100 * relative:.1f}%"


def render_table(
    labels: Sequence[str],
    figures: Sequence[Figures],
    estimates: Sequence[Mapping[str, Estimate]] = (),
) -> str:
    """The combined table; ``estimates`` (per database: row -> estimate, from
    repeated trials) add each mean's interval to its cell."""
    rows = table_rows(figures)
    found = list(estimates) or [{} for _ in figures]
    cells = [
        [
            format_cell(row, f.values.get(row), e.get(row))
            for f, e in zip(figures, found, strict=True)
        ]
        for row in rows
    ]
    widths = [max(len(r) for r in rows)]
    widths += [max(len(labels[c]), *(len(row[c]) for row in cells)) for c in range(len(labels))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(items: Sequence[str]) -> str:
        return "|" + "|".join(f" {item:>{w}} " for item, w in zip(items, widths, strict=True)) + "|"

    out = [rule, line(["", *labels]), rule]
    out += [line([row, *values]) for row, values in zip(rows, cells, strict=True)]
    out.append(rule)
    return "\n".join(out) + "\n"


def render_csv(labels: Sequence[str], figures: Sequence[Figures]) -> str:
    """Raw numbers (no units), one column per database, for tools."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["", *labels])
    for row in table_rows(figures):
        writer.writerow(
            [row, *("" if f.values.get(row) is None else f.values[row] for f in figures)]
        )
    return buffer.getvalue()
