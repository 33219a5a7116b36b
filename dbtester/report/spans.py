"""Fault windows as the charts mark them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes

from dbtester.analyze.figures import Figures

__all__ = ["Span", "fault_spans", "label_at", "label_span"]


@dataclass(frozen=True)
class Span:
    """A fault window to shade: from ``start`` to ``end`` (None: to the end)."""

    start: float
    end: float | None
    label: str


def fault_spans(figures: Sequence[Figures]) -> list[Span]:
    """The scheduled faults' windows, as the first database with any had them
    (in its first trial): every database ran the same schedule, so its moments
    differ between them only by how long the agents took to apply it."""
    for figure in figures:
        if figure.faults:
            first = figure.faults[0].trial
            return [
                Span(f.start_s, f.end_s, f"fault {f.number}: {f.action} {f.target}")
                for f in figure.faults
                if f.trial == first
            ]
    return []


def label_span(ax: Axes, span: Span, color: str) -> None:
    """The fault window's name at the top of its start, in ``color``."""
    label_at(ax, span.start, span.label, color)


def label_at(ax: Axes, x: float, text: str, color: str) -> None:
    """``text`` small, at the top of the axes, just right of ``x``: what a
    vertical mark (a fault, a shift in a series) is."""
    ax.annotate(
        text,
        (x, 1.0),
        xycoords=("data", "axes fraction"),
        xytext=(2, -2),
        textcoords="offset points",
        va="top",
        fontsize="x-small",
        color=color,
    )
