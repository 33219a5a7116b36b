"""One SVG chart per metric, one line per database (file names as the original's)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator, NullLocator

from dbtester.analyze.figures import Figures, Series
from dbtester.report.catalog import CHARTS, HEATMAP, STANDARD, Chart, drawn
from dbtester.report.heatmap import draw_heatmap
from dbtester.report.spans import Span, fault_spans, label_span

__all__ = [
    "CHARTS",
    "HEATMAP",
    "STANDARD",
    "STYLE",
    "Chart",
    "Span",
    "drawn",
    "fault_spans",
    "render_charts",
]

STYLE = Path(__file__).with_name("dbtester.mplstyle")


def render_charts(
    path_for: Callable[[str], Path], labels: Sequence[str], figures: Sequence[Figures]
) -> list[Path]:
    """Write every chart to ``path_for(name)`` (an .svg path); a database without
    data for a chart is listed in its legend as '(no data)' rather than silently
    missing. With repeated trials each line is the trials' mean and a shaded
    band spans the lowest to the highest trial."""
    written = []
    with plt.style.context(str(STYLE)):
        for chart in drawn(figures):
            path = path_for(chart.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            if chart.heatmap:
                draw_heatmap(labels, figures, path, chart.title)
            else:
                _draw(chart, labels, figures, path)
            written.append(path)
    return written


def _draw(chart: Chart, labels: Sequence[str], figures: Sequence[Figures], path: Path) -> None:
    fig, ax = plt.subplots()
    try:
        for label, figure in zip(labels, figures, strict=True):
            series = figure.series.get(chart.name)
            if series is None or len(series.x) == 0:
                ax.plot([], [], label=f"{label} (no data)")
                continue
            if chart.error_points and series.low is not None and series.high is not None:
                errors = [series.y - series.low, series.high - series.y]
                ax.errorbar(
                    series.x,
                    series.y,
                    yerr=errors,
                    fmt="o-",
                    markersize=3,
                    capsize=2,
                    elinewidth=0.8,
                    label=label,
                )
            else:
                (line,) = ax.plot(series.x, series.y, "o-" if chart.markers else "-", label=label)
                if series.band is not None:
                    low, high = series.band
                    ax.fill_between(series.x, low, high, color=line.get_color(), alpha=0.2)
        if chart.reference is not None:
            _reference(ax, chart, figures)
        if chart.over_time:
            _shade(ax, fault_spans(figures))
            _mark_windows(ax, labels, figures)
        ax.set_title(chart.title)
        ax.set_xlabel(chart.x_label)
        if chart.log_x:
            _log_ticks(ax, [figure.series.get(chart.name) for figure in figures])
        elif chart.markers:  # trial numbers: whole ones only
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(chart.y_label)
        ax.legend(loc="best")
        fig.savefig(path)  # the format follows the suffix (.svg)
    finally:
        plt.close(fig)


def _reference(ax: Axes, chart: Chart, figures: Sequence[Figures]) -> None:
    """The chart's reference line, from the first database that has it."""
    for figure in figures:
        line = figure.series.get(chart.reference or "")
        if line is not None and len(line.x):
            ax.plot(line.x, line.y, "--", color="0.4", label=chart.reference_label)
            return


def _shade(ax: Axes, spans: Sequence[Span]) -> None:
    """Grey bands over the fault windows, each labelled at the top."""
    if not spans:
        return
    right = ax.get_xlim()[1]
    for span in spans:
        end = span.end if span.end is not None else right
        ax.axvspan(span.start, end, color="0.5", alpha=0.15, linewidth=0)
        label_span(ax, span, "0.3")


def _mark_windows(ax: Axes, labels: Sequence[str], figures: Sequence[Figures]) -> None:
    """Each database's compactions, bands in its line's colour (the lines
    took the colour cycle in order, one per database), named once in the legend."""
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, figure) in enumerate(zip(labels, figures, strict=True)):
        for number, window in enumerate(figure.windows):
            ax.axvspan(
                window.start_s,
                window.end_s,
                color=colors[index % len(colors)],
                alpha=0.15,
                linewidth=0,
                label=f"{label}: compactions" if number == 0 else None,
            )


def _log_ticks(ax: Axes, series: Sequence[Series | None]) -> None:
    """A log x axis labelled at the x values themselves (the client counts):
    powers of ten alone would not say which counts ran."""
    ax.set_xscale("log")
    ticks = sorted({float(x) for s in series if s is not None for x in s.x})
    if ticks:
        ax.set_xticks(ticks, [f"{t:,.0f}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
