"""One SVG chart per metric, one line per database (file names as the original's)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator, NullLocator

from dbtester.analyze.figures import (
    SEARCH_CURVE,
    SEARCH_TARGET,
    WATCH_BY_WATCHER,
    WATCH_SERIES,
    Figures,
    Series,
    operation_series,
)
from dbtester.analyze.steps import SCALING_SERIES
from dbtester.report.heatmap import draw_heatmap
from dbtester.report.spans import Span, fault_spans, label_span
from dbtester.results import OPERATIONS

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
SECONDS = "Seconds since the load started"
KEYS = "Keys written"
CLIENTS = "Clients"


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    x_label: str
    y_label: str
    error_points: bool = False
    #: drawn only when some database has its series (repeated runs' charts)
    optional: bool = False
    markers: bool = False
    #: a logarithmic x axis, ticked at the x values drawn (client counts: 1 to 1,000)
    log_x: bool = False
    #: a series drawn once, dashed, from the first database that has it (a target)
    reference: str | None = None
    reference_label: str = ""
    #: not lines but each database's latency heatmap (Figures.heatmap)
    heatmap: bool = False

    @property
    def over_time(self) -> bool:
        """Its x axis is seconds since the load started (fault windows are shaded)."""
        return self.x_label == SECONDS


def _scaling(row: str, title: str, y_label: str) -> Chart:
    """A client-scaling chart: ``row`` of each client step against its clients."""
    return Chart(
        SCALING_SERIES[row], title, CLIENTS, y_label, optional=True, markers=True, log_x=True
    )


#: every request by its latency and when it was due, a panel per database
HEATMAP = Chart(
    "LATENCY-HEATMAP",
    "Latency heatmap (requests by latency and time)",
    SECONDS,
    "Latency (ms)",
    optional=True,
    heatmap=True,
)

CHARTS = (
    Chart("AVG-LATENCY-MS", "Average latency", SECONDS, "Latency (ms)"),
    HEATMAP,
    # mixed workloads: each operation's latency on its own chart
    *(
        Chart(
            operation_series(op),
            f"Average latency of {op}s",
            SECONDS,
            "Latency (ms)",
            optional=True,
        )
        for op in OPERATIONS
    ),
    Chart(
        WATCH_SERIES,
        "Average watch event latency (put sent to event received)",
        SECONDS,
        "Latency (ms)",
        optional=True,
    ),
    Chart(
        WATCH_BY_WATCHER,
        "Watch event latency p99 by watcher",
        "Watcher",
        "Latency p99 (ms)",
        optional=True,
        markers=True,
    ),
    Chart("AVG-LATENCY-MS-BY-KEY", "Average latency by keys written", KEYS, "Latency (ms)"),
    Chart(
        "AVG-LATENCY-MS-BY-KEY-ERROR-POINTS",
        "Latency by keys written (min-max)",
        KEYS,
        "Latency (ms)",
        error_points=True,
    ),
    Chart("AVG-THROUGHPUT", "Throughput", SECONDS, "Requests per second"),
    Chart(
        "AVG-VOLUNTARY-CTXT-SWITCHES",
        "Voluntary context switches (avg per member)",
        SECONDS,
        "Switches per second",
    ),
    Chart(
        "AVG-NON-VOLUNTARY-CTXT-SWITCHES",
        "Non-voluntary context switches (avg per member)",
        SECONDS,
        "Switches per second",
    ),
    Chart("AVG-CPU", "Server CPU (avg per member)", SECONDS, "CPU (%; 100 = one core)"),
    Chart("MAX-CPU", "Server CPU (busiest member)", SECONDS, "CPU (%; 100 = one core)"),
    Chart("AVG-VMRSS-MB", "Server memory (avg per member)", SECONDS, "Resident memory (MB)"),
    Chart("AVG-VMRSS-MB-BY-KEY", "Server memory by keys written", KEYS, "Resident memory (MB)"),
    Chart(
        "AVG-VMRSS-MB-BY-KEY-ERROR-POINTS",
        "Server memory by keys written (min-max)",
        KEYS,
        "Resident memory (MB)",
        error_points=True,
    ),
    Chart(
        "HOST-SPEED",
        "Host speed (the client machine's CPU, by the host-speed probe)",
        SECONDS,
        "Probe runs per CPU-second",
        optional=True,
    ),
    Chart(
        "THROUGHPUT-BY-TRIAL",
        "Throughput of each trial",
        "Trial",
        "Requests per second",
        optional=True,
        markers=True,
    ),
    Chart(
        SEARCH_CURVE,
        "Latency by offered rate (the search's probes)",
        "Offered rate (requests per second)",
        "Latency at the search's percentile (ms)",
        optional=True,
        markers=True,
        reference=SEARCH_TARGET,
        reference_label="latency target",
    ),
    _scaling("AVG-THROUGHPUT", "Throughput by clients", "Requests per second"),
    _scaling("Latency p50", "Latency p50 by clients", "Latency (ms)"),
    _scaling("Latency p99", "Latency p99 by clients", "Latency (ms)"),
    _scaling(
        "SERVER-MAX-CPU-USAGE", "Server CPU by clients (busiest member)", "CPU (%; 100 = one core)"
    ),
    Chart("AVG-READS-COMPLETED-DELTA", "Disk reads completed", SECONDS, "Reads per second"),
    Chart("AVG-SECTORS-READ-DELTA", "Disk sectors read", SECONDS, "Sectors per second"),
    Chart("AVG-WRITES-COMPLETED-DELTA", "Disk writes completed", SECONDS, "Writes per second"),
    Chart("AVG-SECTORS-WRITTEN-DELTA", "Disk sectors written", SECONDS, "Sectors per second"),
    Chart(
        "AVG-READ-BYTES-NUM-DELTA",
        "Bytes read by the database process",
        SECONDS,
        "Bytes per second",
    ),
    Chart(
        "AVG-WRITE-BYTES-NUM-DELTA",
        "Bytes written by the database process",
        SECONDS,
        "Bytes per second",
    ),
    Chart(
        "AVG-RECEIVE-BYTES-NUM-DELTA",
        "Network bytes received (avg per member)",
        SECONDS,
        "Bytes per second",
    ),
    Chart(
        "AVG-TRANSMIT-BYTES-NUM-DELTA",
        "Network bytes transmitted (avg per member)",
        SECONDS,
        "Bytes per second",
    ),
)


#: the charts every run has
STANDARD = tuple(c for c in CHARTS if not c.optional)


def drawn(figures: Sequence[Figures]) -> list[Chart]:
    """The charts for these databases: every one, and the optional ones with data."""
    return [c for c in CHARTS if not c.optional or any(_has(c, f) for f in figures)]


def _has(chart: Chart, figures: Figures) -> bool:
    return figures.heatmap is not None if chart.heatmap else chart.name in figures.series


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


def _log_ticks(ax: Axes, series: Sequence[Series | None]) -> None:
    """A log x axis labelled at the x values themselves (the client counts):
    powers of ten alone would not say which counts ran."""
    ax.set_xscale("log")
    ticks = sorted({float(x) for s in series if s is not None for x in s.x})
    if ticks:
        ax.set_xticks(ticks, [f"{t:,.0f}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
