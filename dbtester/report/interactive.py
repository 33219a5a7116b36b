"""The interactive report: ``report.html``, one page a reader opens in any
browser, also offline or from a bucket.

It holds the combined table (with the trials' intervals), the comparison
(with its verdicts), every chart as an interactive Bokeh plot (box zoom,
wheel zoom, pan, reset; hovering a line shows the database and the values
there; a click on a legend entry hides that database in that plot, and the
checkboxes above the charts hide it in every plot), the run's environment
and the test case that ran.

Self-contained: BokehJS (the core bundle only, about 1.3 MB) and every
plot's data are inlined, and the page's Content-Security-Policy forbids any
request, so opening it contacts no other host. Bokeh gzips each array into
the page, so a 3M-request run's per-second series need no downsampling.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from bokeh import plotting
from bokeh.document import Document
from bokeh.embed import components
from bokeh.models import (
    ColumnDataSource,
    FixedTicker,
    HoverTool,
    NumeralTickFormatter,
)
from bokeh.models.annotations import BoxAnnotation, Label
from bokeh.models.glyphs import Line, Scatter
from bokeh.models.renderers import GlyphRenderer
from bokeh.palettes import Category10_10
from bokeh.resources import Resources

from dbtester import __version__
from dbtester.analyze import Analysis, Compared
from dbtester.analyze.figures import Figures, Series, grouped_rows, table_rows
from dbtester.report.charts import Chart, Span, drawn, fault_spans
from dbtester.report.comparison import change_parts, headline, method
from dbtester.report.heatmap import heatmap_plot, heatmaps, highest
from dbtester.report.table import format_cell
from dbtester.results import RunSummary

__all__ = ["PLOT_HEIGHT", "render_html_report"]

PLOT_HEIGHT = 360
#: what the page may load: nothing from anywhere; its own inline scripts and
#: styles, and images it makes itself (a plot saved as PNG)
POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline';"
    " img-src data: blob:; font-src data:"
)
#: the chart's hover lists values with up to 3 decimals and thousands separators
VALUE = "{0,0.[000]}"
#: series with fewer points get markers: a short run's per-second series may
#: be one point, which a line alone does not show
SPARSE = 30


def render_html_report(
    analysis: Analysis, summary: RunSummary, *, test_case: str, comparison: str
) -> str:
    """The page for ``analysis`` (``summary``: the run's environment and id;
    ``test_case``: config.yaml as it ran; ``comparison``: the text under the
    table, shown when there are no verdicts to tabulate)."""
    case = analysis.results.case
    shown = drawn(analysis.figures)
    groups = [_plots(chart, analysis.labels, analysis.figures) for chart in shown]
    plots = [plot for group in groups for plot in group]
    document = Document()
    # Bokeh walks every model of a document each time a root is added (seconds
    # for twenty plots); frozen, it walks them once
    with document.models.freeze():
        for plot in plots:
            document.add_root(plot)
    script, divs = components(plots)
    placed = iter(divs)
    charts = "\n".join(
        f'<section class="chart" id="chart-{html.escape(chart.name)}">'
        + "".join(next(placed) for _ in group)
        + "</section>"
        for chart, group in zip(shown, groups, strict=True)
    )
    body = [
        f"<h1>{html.escape(case.title)}</h1>",
        _NAV,
        _paragraphs(case.description),
        _summary(headline(analysis)),
        _notes(analysis.notes),
        '<h2 id="results">Results</h2>',
        _table(analysis),
        _comparison(analysis, comparison),
        '<h2 id="charts">Charts</h2>',
        _toggles(analysis.labels),
        charts,
        '<h2 id="environment">Environment</h2>',
        _environment(summary),
        '<h2 id="test-case">Test case</h2>',
        f'<pre class="case">{html.escape(test_case)}</pre>',
    ]
    return _PAGE.format(
        policy=POLICY,
        title=html.escape(case.title),
        style=_STYLE,
        bokeh=Resources(mode="inline", components=["bokeh"]).render_js(),
        body="\n".join(part for part in body if part),
        plots=script,
        toggle=_TOGGLE,
    )


# --------------------------------------------------------------------------- plots


def _plots(
    chart: Chart, labels: Sequence[str], figures: Sequence[Figures]
) -> list[plotting.figure]:
    """A chart's plots: one, or a heatmap per database that has one."""
    if not chart.heatmap:
        return [_plot(chart, labels, figures)]
    top = highest(heatmaps(labels, figures))
    return [
        heatmap_plot(chart.title, label, f.heatmap, figures, top, _tag(index), f.windows)
        for index, (label, f) in enumerate(zip(labels, figures, strict=True))
        if f.heatmap is not None
    ]


def _plot(chart: Chart, labels: Sequence[str], figures: Sequence[Figures]) -> plotting.figure:
    """One chart: a line per database (its trials' band and min-max points
    where it has them), hover values, zoom, and a legend that hides on click."""
    plot = plotting.figure(
        title=chart.title,
        x_axis_label=chart.x_label,
        y_axis_label=chart.y_label,
        x_axis_type="log" if chart.log_x else "linear",
        height=PLOT_HEIGHT,
        sizing_mode="stretch_width",
        tools="box_zoom,xwheel_zoom,pan,reset,save",
        active_drag="box_zoom",
        name=chart.name,
    )
    plot.toolbar.logo = None
    for index, (label, found) in enumerate(zip(labels, figures, strict=True)):
        color = Category10_10[index % len(Category10_10)]
        tag = _tag(index)
        series = found.series.get(chart.name)
        if series is None or len(series.x) == 0:
            # listed, as in the SVG charts, rather than silently missing
            empty = plot.line([], [], legend_label=f"{label} (no data)", color=color)
            empty.tags = [tag]
            continue
        line = _draw(plot, chart, series, label, color, tag)
        side: Literal["left", "right"] = "right" if index % 2 == 0 else "left"
        plot.add_tools(_hover(chart, label, color, side, line, series))
    if chart.reference is not None:
        _reference(plot, chart, figures)
    if chart.over_time:
        _shade(plot, fault_spans(figures))
        for index, found in enumerate(figures):
            _mark_windows(plot, found, Category10_10[index % len(Category10_10)], _tag(index))
    if chart.log_x:
        ticks = sorted({float(x) for f in figures if (s := f.series.get(chart.name)) for x in s.x})
        plot.xaxis.ticker = FixedTicker(ticks=ticks)
        plot.xaxis.formatter = NumeralTickFormatter(format="0,0")
    plot.legend.click_policy = "hide"
    plot.legend.location = "top_left"
    plot.legend.background_fill_alpha = 0.6
    return plot


def _reference(plot: plotting.figure, chart: Chart, figures: Sequence[Figures]) -> None:
    """The chart's reference line (a target), dashed, from the first database
    that has it."""
    for found in figures:
        line = found.series.get(chart.reference or "")
        if line is not None and len(line.x):
            plot.line(
                x=line.x,
                y=line.y,
                color="#666666",
                line_dash="dashed",
                line_width=1.5,
                legend_label=chart.reference_label,
            )
            return


def _shade(plot: plotting.figure, spans: Sequence[Span]) -> None:
    """Grey boxes over the fault windows (one without an end runs off the
    plot's right edge), each labelled at the top."""
    for span in spans:
        box = BoxAnnotation(left=span.start, fill_color="gray", fill_alpha=0.15)
        if span.end is not None:
            box.right = span.end
        plot.add_layout(box)
        plot.add_layout(
            Label(
                x=span.start,
                y=0,
                y_units="screen",
                text=span.label,
                text_font_size="10px",
                text_color="#555555",
                x_offset=2,
                y_offset=PLOT_HEIGHT - 90,
            )
        )


def _mark_windows(plot: plotting.figure, found: Figures, color: str, tag: str) -> None:
    """The database's compactions, boxes in its line's colour."""
    for window in found.windows:
        box = BoxAnnotation(
            left=window.start_s, right=window.end_s, fill_color=color, fill_alpha=0.15
        )
        box.tags = [tag]
        plot.add_layout(box)


def _draw(
    plot: plotting.figure, chart: Chart, series: Series, label: str, color: str, tag: str
) -> GlyphRenderer[Line] | GlyphRenderer[Scatter]:
    """The database's glyphs on ``plot``, all under one legend entry; returns
    what hovering finds: its line, or the markers of a one-point series."""
    data: dict[str, Any] = {"x": series.x, "y": series.y}
    if series.band is not None:
        data["band_low"], data["band_high"] = series.band
    points = chart.error_points and series.low is not None and series.high is not None
    if points:
        data["low"], data["high"] = series.low, series.high
    source = ColumnDataSource(data)
    common: dict[str, Any] = {"source": source, "legend_label": label}
    glyphs: list[GlyphRenderer[Any]] = []
    if series.band is not None:
        glyphs.append(
            plot.varea(
                x="x", y1="band_low", y2="band_high", fill_color=color, fill_alpha=0.2, **common
            )
        )
    if points:
        glyphs.append(
            plot.segment(x0="x", y0="low", x1="x", y1="high", color=color, alpha=0.6, **common)
        )
    line = plot.line(x="x", y="y", color=color, line_width=2, **common)
    glyphs.append(line)
    hovered: GlyphRenderer[Line] | GlyphRenderer[Scatter] = line
    if chart.markers or points or len(series.x) < SPARSE:
        size = 4 if points else 6
        markers = plot.scatter(x="x", y="y", color=color, size=size, **common)
        glyphs.append(markers)
        if len(series.x) < 2:  # no line to hover over
            hovered = markers
    for renderer in glyphs:  # (a glyph method's tags= would tag the glyph, not the renderer)
        renderer.tags = [tag]
    return hovered


def _hover(
    chart: Chart,
    label: str,
    color: str,
    side: Literal["left", "right"],
    line: GlyphRenderer[Line] | GlyphRenderer[Scatter],
    series: Series,
) -> HoverTool:
    """Hovering anywhere above or below the line shows its value at that x
    (over the marker, for a one-point series), in a box on ``side`` of it:
    databases alternate sides, so that lines close together do not hide each
    other's values."""
    rows = [
        f'<div class="hover-database" style="font-weight:bold;color:{color}">'
        f"{_literal(label)}</div>",
        _tip_row(chart.x_label, "x", f"@x{VALUE}"),
        _tip_row(chart.y_label, "y", f"@y{VALUE}"),
    ]
    if series.band is not None:
        rows.append(_tip_row("trials", "band", f"@band_low{VALUE} to @band_high{VALUE}"))
    if chart.error_points and series.low is not None:
        rows.append(_tip_row("min-max", "range", f"@low{VALUE} to @high{VALUE}"))
    return HoverTool(renderers=[line], tooltips="".join(rows), mode="vline", attachment=side)


def _tip_row(name: str, kind: str, value: str) -> str:
    return f'<div>{_literal(name)}: <span class="hover-{kind}">{value}</span></div>'


def _literal(text: str) -> str:
    """``text`` as HTML in a tooltip, where '@' and '$' would name fields."""
    return html.escape(text).replace("@", "&#64;").replace("$", "&#36;")


def _tag(index: int) -> str:
    """What marks database ``index``'s glyphs for the page's checkboxes."""
    return f"database-{index}"


# --------------------------------------------------------------------------- sections


def _paragraphs(text: str) -> str:
    parts = [p.strip() for p in text.strip().split("\n\n") if p.strip()]
    return "\n".join(f"<p>{html.escape(p)}</p>" for p in parts)


def _summary(lines: Sequence[str]) -> str:
    """What differed, above everything else (the README opens the same way)."""
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f'<h2 id="summary">Summary</h2><ul class="summary">{items}</ul>'


def _notes(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    # labelled as the README labels them: right under the summary's list,
    # unlabelled notes read as more of the summary
    items = "".join(f"<li><strong>Note</strong>: {html.escape(note)}</li>" for note in notes)
    return f'<ul class="notes">{items}</ul>'


def _table(analysis: Analysis) -> str:
    """The combined table: the rows and cells of summary.txt (with ±intervals),
    grouped by what they are about (throughput, latency, server, ...)."""
    figures, estimates = analysis.figures, analysis.estimates
    head = "".join(
        f"<th>{html.escape(db.label)}{'' if db.passed else ' (FAILED)'}</th>"
        for db in analysis.databases
    )
    span = len(analysis.databases) + 1
    rows = []
    for group, members in grouped_rows(table_rows(figures)):
        rows.append(f'<tr class="group"><th colspan="{span}">{html.escape(group)}</th></tr>')
        for row in members:
            cells = "".join(
                f"<td>{html.escape(format_cell(row, f.values.get(row), e.get(row)))}</td>"
                for f, e in zip(figures, estimates, strict=True)
            )
            rows.append(f"<tr><th>{html.escape(row)}</th>{cells}</tr>")
    return (
        f'<table class="figures"><thead><tr><th></th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _comparison(analysis: Analysis, text: str) -> str:
    """Each database against the first, with verdicts: a table when trials
    give verdicts, else the comparison's sentence (it says why not)."""
    if analysis.repeat < 2 or not analysis.comparisons:
        return f'<p class="comparison">{html.escape(text.strip())}</p>' if text.strip() else ""
    labels = {db.id: db.label for db in analysis.databases}
    head = "".join(
        f"<th>{h}</th>"
        for h in ("database", "metric", "change", "95% interval", "p-value", "trials", "verdict")
    )
    rows = [_comparison_row(item, labels) for item in analysis.comparisons]
    baseline = html.escape(analysis.databases[0].label)
    return (
        f"<h3>Compared with {baseline}</h3>"
        f'<p class="method">{html.escape(_sentence(method(analysis)))}</p>'
        f'<table class="comparison"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _sentence(text: str) -> str:
    """``text`` as a sentence: its first letter capital, a full stop at its end."""
    return text[:1].upper() + text[1:] + "."


def _comparison_row(item: Compared, labels: dict[str, str]) -> str:
    c = item.change
    change, interval, p = change_parts(c)
    kind = "worse" if c.worse else "better" if c.significant else "same"
    cells = (
        labels.get(item.database, item.database),
        c.metric.row,
        change,
        interval,
        p.removeprefix("p="),
        f"{c.baseline.n}+{c.other.n}",
    )
    tds = "".join(f"<td>{html.escape(cell)}</td>" for cell in cells)
    return f'<tr>{tds}<td class="verdict {kind}">{html.escape(c.verdict)}</td></tr>'


def _toggles(labels: Sequence[str]) -> str:
    boxes = "".join(
        f'<label><input type="checkbox" checked data-database="{_tag(i)}">'
        f"{html.escape(label)}</label>"
        for i, label in enumerate(labels)
    )
    return (
        f'<div class="toggles">Show in every chart: {boxes}</div>'
        '<p class="help">Drag a box to zoom (the toolbar switches to wheel zoom or pan),'
        " double-click or the reset button to zoom out; hover a line for its values;"
        " click a legend entry to hide that database in one chart.</p>"
    )


def _environment(summary: RunSummary) -> str:
    environment = summary.environment.to_json()
    found: list[tuple[str, object]] = [
        ("run id", summary.run_id),
        ("started", _when(summary.started_unix)),
        ("trials per database", summary.repeat),
        ("analysed by dbtester", summary.analyzed_by or __version__),
        *((key, value) for key, value in environment.items() if value not in ("", None)),
    ]
    rows = "".join(
        f"<tr><th>{html.escape(key)}</th><td>{html.escape(_text(value))}</td></tr>"
        for key, value in found
        if value not in ("", None)
    )
    return f'<table class="environment"><tbody>{rows}</tbody></table>'


def _when(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if unix else ""


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


# --------------------------------------------------------------------------- the page

_NAV = (
    '<nav><a href="#results">Results</a> · <a href="#charts">Charts</a> ·'
    ' <a href="#environment">Environment</a> · <a href="#test-case">Test case</a>'
    f" · made by dbtester {html.escape(__version__)}</nav>"
)

_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222;
       margin: 0 auto; max-width: 1200px; padding: 1em 2em 4em; }
h1 { font-size: 1.6em; margin-bottom: 0.3em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 0.2em 0.8em; border-bottom: 1px solid #eee; }
table.figures td, table.comparison td { text-align: right; white-space: nowrap; }
table.figures tbody th, table.environment th { text-align: left; font-weight: 500; }
table.figures tbody tr:hover { background: #f4f8fc; }
table.figures tr.group th { text-align: left; font-weight: 700; padding-top: 0.8em;
  border-bottom: 1px solid #ccd; }
.verdict.better { color: #11772d; font-weight: 600; }
.verdict.worse { color: #b3261e; font-weight: 600; }
.verdict.same { color: #777; }
.notes li { margin: 0.2em 0; }
.toggles { position: sticky; top: 0; background: #fff; padding: 0.5em 0; z-index: 10;
           border-bottom: 1px solid #eee; }
.toggles label { margin-left: 1em; white-space: nowrap; }
.help, .method, nav { color: #666; font-size: 0.9em; }
.chart { margin: 1.5em 0; }
pre.case { background: #f6f6f6; padding: 1em; overflow-x: auto; }
"""

# Hides or shows every glyph tagged with a database, in every plot.
_TOGGLE = """
document.querySelectorAll("input[data-database]").forEach(function (box) {
  box.addEventListener("change", function () {
    for (const doc of Bokeh.documents) {
      for (const model of doc.all_models) {
        if (model.tags && model.tags.includes(box.dataset.database)) {
          model.visible = box.checked;
        }
      }
    }
  });
});
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="dbtester">
<title>{title}</title>
<style>{style}</style>
{bokeh}
</head>
<body>
{body}
{plots}
<script>{toggle}</script>
</body>
</html>
"""
