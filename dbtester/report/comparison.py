"""The comparison section: each database against the first (the baseline),
in the manner of Go's benchstat — the change of the mean with its 95%
interval, the p-value and a verdict — as text for the console and the README."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dbtester.analyze import Compared

__all__ = ["render_comparisons"]

METHOD = (
    "change of the mean against the baseline, its 95% interval and the p-value of"
    " Welch's t-test over the trials; a verdict where p < 0.05, ~ where not"
)


def render_comparisons(
    labels: Mapping[str, str], order: Sequence[str], compared: Sequence[Compared], trials: int
) -> str:
    """The section for databases ``order`` (ids, the baseline first); empty
    with fewer than two databases."""
    if len(order) < 2:
        return ""
    baseline = labels[order[0]]
    if trials < 2:
        return (
            f"Compared with {baseline}: differences cannot be judged from one trial each;"
            " set `repeat: 5` in the test case (or `dbtester run --repeat 5`) for"
            " intervals and verdicts.\n"
        )
    lines = [f"Compared with {baseline} ({trials} trials each; {METHOD}):"]
    width = max(len(c.change.metric.row) for c in compared) if compared else 0
    for db_id in order[1:]:
        lines.append(f"  {labels[db_id]}")
        for item in (c for c in compared if c.database == db_id):
            lines.append(f"    {item.change.metric.row:<{width}}  {_describe(item)}")
    return "\n".join(lines) + "\n"


def _describe(item: Compared) -> str:
    c = item.change
    interval = (
        f"[{c.low_pct:+.1f}%, {c.high_pct:+.1f}%]"
        if c.low_pct is not None and c.high_pct is not None
        else ""
    )
    p = f"p={c.p_value:.3f}" if c.p_value is not None else "p=?"
    return (
        f"{c.change_pct:+7.1f}%  {interval:<18}  {p:<8}  n={c.baseline.n}+{c.other.n}  {c.verdict}"
    )
