"""Many trials of one database made into one column: each numeric row's mean
with its 95% interval, one series per chart (the trials' mean, with their
spread as a band), a THROUGHPUT-BY-TRIAL series that shows drift, and the
median trial's latency heatmap. One
trial is passed through as it is, so a run without ``repeat`` reads exactly
as before. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from dbtester.analyze.figures import CV_ROW, TREND_ROW, Figures, Series
from dbtester.analyze.heatmap import Heatmap
from dbtester.analyze.stats import Estimate, estimate, trend

__all__ = ["BY_TRIAL", "add_trend", "combine"]

#: each trial's AVG-THROUGHPUT against its number
BY_TRIAL = "THROUGHPUT-BY-TRIAL"


def combine(
    trials: Sequence[Figures], numbers: Sequence[int]
) -> tuple[Figures, dict[str, Estimate]]:
    """The column for trials ``numbers`` (in order) and each numeric row's estimate."""
    if len(trials) == 1:
        return trials[0], {}
    combined = Figures()
    estimates: dict[str, Estimate] = {}
    rows = dict.fromkeys(row for f in trials for row in f.values)
    for row in rows:
        values = [f.values.get(row) for f in trials]
        numbers_only = [float(v) for v in values if isinstance(v, int | float)]
        if numbers_only and len(numbers_only) == sum(v is not None for v in values):
            estimates[row] = estimate(numbers_only)
            combined.values[row] = estimates[row].mean
        else:
            combined.values[row] = _words(values)
    throughput = estimates.get("AVG-THROUGHPUT")
    if throughput is not None and throughput.cv is not None:
        combined.values[CV_ROW] = 100.0 * throughput.cv
    charts = dict.fromkeys(name for f in trials for name in f.series)
    for name in charts:
        series = [f.series[name] for f in trials if name in f.series]
        combined.series[name] = _mean_series(series)
    by_trial = [
        (n, float(v))
        for n, f in zip(numbers, trials, strict=True)
        if isinstance(v := f.values.get("AVG-THROUGHPUT"), int | float)
    ]
    if by_trial:
        x, y = zip(*by_trial, strict=True)
        combined.series[BY_TRIAL] = Series(np.array(x, dtype=float), np.array(y, dtype=float))
    combined.notes = _notes(trials, numbers)
    combined.faults = [f for trial in trials for f in trial.faults]
    combined.heatmap = _median_heatmap(trials, numbers)
    # the heatmap's trial's: its panel marks them (the first's without one)
    chosen = combined.heatmap.trial if combined.heatmap is not None else numbers[0]
    combined.windows = trials[list(numbers).index(chosen)].windows
    return combined, estimates


def add_trend(
    label: str, trials: Sequence[Figures], starts_s: Sequence[float], combined: Figures
) -> None:
    """TREND_ROW in ``combined``: AVG-THROUGHPUT's trend across ``trials``
    (their loads begun at ``starts_s``, unix seconds; none unless every
    trial has a throughput), and a note when it is clear."""
    values = [f.values.get("AVG-THROUGHPUT") for f in trials]
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    if len(numbers) != len(trials) or (drift := trend(numbers, starts_s)) is None:
        return
    combined.values[TREND_ROW] = drift.pct_per_min
    if drift.clear:
        way = "fell" if drift.pct_per_min < 0 else "rose"
        combined.notes.append(
            f"{label}: its throughput {way} {abs(drift.pct_per_min):.1f}% a minute across its"
            f" trials (95% interval {drift.low:+.1f}% to {drift.high:+.1f}%): a cluster that"
            " changes as it fills (interleave: slices load one cluster throughout), or a"
            " machine that drifted; the trials' mean hides it"
        )


def _median_heatmap(trials: Sequence[Figures], numbers: Sequence[int]) -> Heatmap | None:
    """The heatmap of the trial whose throughput is the median (the lower
    of the middle two): trials' time axes are their own, so their maps are
    shown one at a time, and the median trial is the typical one."""
    mapped = [
        (float(v) if isinstance(v := f.values.get("AVG-THROUGHPUT"), int | float) else 0.0, n, h)
        for f, n in zip(trials, numbers, strict=True)
        if (h := f.heatmap) is not None
    ]
    if not mapped:
        return None
    mapped.sort(key=lambda m: (m[0], m[1]))
    _, number, heatmap = mapped[(len(mapped) - 1) // 2]
    return replace(heatmap, trial=number)


def _notes(trials: Sequence[Figures], numbers: Sequence[int]) -> list[str]:
    """Each note once: as it is when every trial has it, else with the trials'."""
    where: dict[str, list[int]] = {}
    for number, figures in zip(numbers, trials, strict=True):
        for note in figures.notes:
            where.setdefault(note, []).append(number)
    return [
        note if len(found) == len(trials) else f"trial {', '.join(map(str, found))}: {note}"
        for note, found in where.items()
    ]


def _words(values: Sequence[object]) -> str | None:
    """A text row across trials: the one value all share, how many say OK
    (a check's row), how many give each verdict (a verdict and its counts:
    "linearizable (2,512 operations)"), or else each trial's, in order."""
    texts = [str(v) for v in values if v is not None]
    if not texts:
        return None
    if len(set(texts)) == 1 and len(texts) == len(values):
        return texts[0]
    if any(t.endswith((" OK", " FAILED")) for t in texts):
        ok = sum(t.endswith(" OK") for t in texts)
        return f"OK in {ok} of {len(values)} trials"
    verdicts = [t.split(" (", 1)[0] for t in texts]
    if len(texts) == len(values) and all(
        " (" in t and v[:1].isalpha() for t, v in zip(texts, verdicts, strict=True)
    ):
        counted = Counter(verdicts)
        if len(counted) == 1:
            return f"{verdicts[0]} in all {len(values)} trials"
        return "; ".join(f"{v} in {n} of {len(values)} trials" for v, n in counted.items())
    return "; ".join(_word(v) for v in values)


def _word(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _mean_series(series: Sequence[Series]) -> Series:
    """The trials' series on a shared x (seconds and keys rounded to whole
    ones): the mean, the lowest and highest trial as its band, and the
    min-max error points (where the series have them) across all trials."""
    points = all(s.low is not None and s.high is not None for s in series)
    frame = pd.concat(
        [
            pd.DataFrame(
                {
                    "x": np.round(s.x),
                    "y": s.y,
                    "low": s.low if s.low is not None else s.y,
                    "high": s.high if s.high is not None else s.y,
                }
            )
            for s in series
        ],
        ignore_index=True,
    )
    grouped = frame.groupby("x").agg(
        y=("y", "mean"),
        band_low=("y", "min"),
        band_high=("y", "max"),
        low=("low", "min"),
        high=("high", "max"),
    )
    column = {name: grouped[name].to_numpy(dtype=float) for name in grouped.columns}
    return Series(
        grouped.index.to_numpy(dtype=float),
        column["y"],
        column["low"] if points else None,
        column["high"] if points else None,
        band=(column["band_low"], column["band_high"]),
    )
