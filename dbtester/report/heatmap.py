"""The latency heatmap drawn: one panel per database, time across, latency
up on a log scale, the count of requests as colour (log scale too: a
bucket of ten requests beside one of ten thousand must both show). Fault
windows are drawn as dashed lines at their start and end, which a grey band
would hide the colours under. An SVG (``draw_heatmap``) and a Bokeh plot
for report.html (``heatmap_plot``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt
import numpy as np
from bokeh import plotting
from bokeh.models import ColumnDataSource, HoverTool, LogColorMapper, Range1d
from bokeh.models.annotations import BoxAnnotation, ColorBar, Label
from bokeh.models.annotations import Span as BokehSpan
from bokeh.palettes import Viridis256
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm
from matplotlib.ticker import NullLocator

from dbtester.analyze.figures import Figures, Window
from dbtester.analyze.heatmap import Heatmap
from dbtester.analyze.trials import BY_TRIAL
from dbtester.report.spans import Span, fault_spans, label_span

__all__ = ["X_LABEL", "Y_LABEL", "draw_heatmap", "heatmap_plot", "heatmaps"]

X_LABEL = "Seconds since the load started"
Y_LABEL = "Latency (ms)"

#: each database's panel in the SVG (inches)
PANEL_HEIGHT_IN = 2.4
#: each database's plot in report.html (pixels)
PLOT_HEIGHT = 260


def heatmaps(labels: Sequence[str], figures: Sequence[Figures]) -> list[tuple[str, Heatmap]]:
    """(label, heatmap) of each database that has one."""
    return [(label, f.heatmap) for label, f in zip(labels, figures, strict=True) if f.heatmap]


def panel_title(label: str, heatmap: Heatmap, figures: Sequence[Figures]) -> str:
    """The database, which trial (with repeated trials), the column width."""
    trials = any(BY_TRIAL in f.series for f in figures)
    of = f" (trial {heatmap.trial}, the median by throughput)" if trials else ""
    return f"{label}{of}: {heatmap.width_s:g} s columns"


def highest(mapped: Sequence[tuple[str, Heatmap]]) -> int:
    """The largest cell of any of them: the top of the shared colour scale."""
    return max((int(h.counts.max()) for _, h in mapped), default=1)


def draw_heatmap(labels: Sequence[str], figures: Sequence[Figures], path: Path, title: str) -> None:
    """The SVG: a panel per database with a heatmap (the databases without one
    are named in the title); the cells are embedded as one image, so the file
    stays small however many columns there are."""
    mapped = heatmaps(labels, figures)
    missing = [label for label, f in zip(labels, figures, strict=True) if f.heatmap is None]
    fig, axes = plt.subplots(
        len(mapped),
        1,
        squeeze=False,
        sharex=True,
        sharey=True,
        figsize=(8, 1.2 + PANEL_HEIGHT_IN * len(mapped)),
        layout="constrained",  # the panels and colour bars clear of the title
    )
    try:
        top = highest(mapped)
        norm = LogNorm(vmin=1, vmax=max(2, top))
        spans = fault_spans(figures)
        for ax, (label, heatmap) in zip(axes[:, 0], mapped, strict=True):
            x = np.append(heatmap.starts_s, heatmap.columns * heatmap.width_s)
            cells = np.ma.masked_equal(heatmap.counts, 0)
            mesh = ax.pcolormesh(
                x, heatmap.edges_ms, cells, norm=norm, cmap="viridis", rasterized=True
            )
            ax.set_yscale("log")
            ax.set_ylabel(Y_LABEL)
            ax.set_title(panel_title(label, heatmap, figures), fontsize="small", loc="left")
            _lines(ax, spans)
            _strips(ax, _windows(label, labels, figures))
            bar = fig.colorbar(mesh, ax=ax, label="Requests", pad=0.01)
            # powers of ten only: a log colour bar's default minor ticks took
            # a third of the drawing's time
            bar.set_ticks([10.0**k for k in range(len(str(max(2, top))))])
            bar.ax.yaxis.set_minor_locator(NullLocator())
        fig.suptitle(title + (f" ({', '.join(missing)}: no data)" if missing else ""))
        axes[-1, 0].set_xlabel(X_LABEL)
        fig.savefig(path, dpi=150)
    finally:
        plt.close(fig)


def _windows(label: str, labels: Sequence[str], figures: Sequence[Figures]) -> list[Window]:
    """The compactions of the database ``label`` names: its panel marks them."""
    return figures[list(labels).index(label)].windows


#: the colour of the strips along a panel's foot that mark its compactions:
#: seen on the white of no requests and on every colour of the map
STRIP = "#d62728"


def _strips(ax: Axes, windows: Sequence[Window]) -> None:
    """The compactions as strips along the panel's foot (a band over the
    cells would hide what they did to the latency), named at the first."""
    for window in windows:
        ax.axvspan(window.start_s, window.end_s, ymin=0.0, ymax=0.04, color=STRIP, linewidth=0)
    if windows:
        ax.annotate(
            "compactions",
            (windows[0].end_s, 0.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, 2),
            textcoords="offset points",
            fontsize="x-small",
            color=STRIP,
        )


def _lines(ax: Axes, spans: Sequence[Span]) -> None:
    for span in spans:
        for at in (span.start, span.end):
            if at is not None:
                ax.axvline(at, color="white", linestyle="--", linewidth=0.8)
        label_span(ax, span, "white")


def heatmap_plot(
    title: str,
    label: str,
    heatmap: Heatmap,
    figures: Sequence[Figures],
    top_count: int,
    tag: str,
    windows: Sequence[Window] = (),
) -> plotting.figure:
    """One database's heatmap for report.html: zoom and pan as the other
    plots, hovering a cell gives its time, latency bucket and count. Colours
    run to ``top_count``, the largest cell of any database, so the panels
    compare."""
    top = float(heatmap.edges_ms[-1])
    plot = plotting.figure(
        title=f"{title}: {panel_title(label, heatmap, figures)}",
        x_axis_label=X_LABEL,
        y_axis_label=Y_LABEL,
        y_axis_type="log",
        y_range=Range1d(start=float(heatmap.edges_ms[0]), end=top),
        height=PLOT_HEIGHT,
        sizing_mode="stretch_width",
        tools="box_zoom,xwheel_zoom,pan,reset,save",
        active_drag="box_zoom",
        name=f"heatmap-{tag}",
    )
    plot.toolbar.logo = None
    rows, columns = np.nonzero(heatmap.counts)
    mapper = LogColorMapper(palette=Viridis256, low=1, high=max(2, top_count))
    source = ColumnDataSource(
        {
            "left": heatmap.starts_s[columns],
            "right": heatmap.starts_s[columns] + heatmap.width_s,
            "bottom": heatmap.edges_ms[rows],
            "top": heatmap.edges_ms[rows + 1],
            "count": heatmap.counts[rows, columns],
        }
    )
    cells = plot.quad(
        source=source,
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        fill_color={"field": "count", "transform": mapper},
        line_color=None,
    )
    cells.tags = [tag]  # the page's checkboxes hide a database by its tag
    plot.add_tools(
        HoverTool(
            renderers=[cells],
            tooltips=[
                ("from", "@left{0,0.[00]} s"),
                ("latency", "@bottom{0,0.[000]} to @top{0,0.[000]} ms"),
                ("requests", "@count{0,0}"),
            ],
        )
    )
    plot.add_layout(ColorBar(color_mapper=mapper, title="Requests"), "right")
    floor = float(heatmap.edges_ms[0])
    for window in windows:  # its compactions: strips along the foot, as in the SVG
        box = BoxAnnotation(
            left=window.start_s,
            right=window.end_s,
            bottom=floor,
            top=floor * (top / floor) ** 0.04,  # the foot's 4% on the log axis
            fill_color=STRIP,
            fill_alpha=1.0,
            line_alpha=0.0,
        )
        plot.add_layout(box)
    for span in fault_spans(figures):
        for at in (span.start, span.end):
            if at is not None:
                plot.add_layout(
                    BokehSpan(location=at, dimension="height", line_dash="dashed", line_color="red")
                )
        plot.add_layout(
            Label(x=span.start, y=top, y_offset=-12, text=span.label, text_font_size="9px")
        )
    return plot
