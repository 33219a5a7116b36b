"""The comparison section: each database against the first (the baseline),
in the manner of Go's benchstat — the change of the mean with its 95%
interval, the p-value and a verdict — as text for the console and the README."""

from __future__ import annotations

from dbtester.analyze import Analysis
from dbtester.analyze.figures import SEARCH_ROWS
from dbtester.analyze.sequential import interval_text
from dbtester.analyze.stats import Change

__all__ = ["change_parts", "describe_change", "headline", "method", "paired", "render_comparisons"]


def paired(analysis: Analysis) -> bool:
    """Whether the comparisons paired round k's slices (interleave: slices)
    rather than set independent trials against each other."""
    return bool(analysis.comparisons) and all(c.change.paired for c in analysis.comparisons)


def method(analysis: Analysis) -> str:
    """How the comparisons were made, in words."""
    test = (
        "a paired t-test over the rounds of slices (each round's difference one observation)"
        if paired(analysis)
        else "Welch's t-test over the trials"
    )
    return (
        "change of the mean against the baseline, its 95% interval and the p-value of"
        f" {test}; a verdict where p < 0.05, ~ where not"
    )


def render_comparisons(analysis: Analysis) -> str:
    """The section for the analysed databases (the first is the baseline);
    empty with fewer than two databases."""
    databases, compared, trials = analysis.databases, analysis.comparisons, analysis.repeat
    if len(databases) < 2:
        return ""
    baseline = databases[0].label
    if trials < 2:
        return (
            f"Compared with {baseline}: differences cannot be judged from one trial each;"
            " set `repeat: 5` in the test case (or `dbtester run --repeat 5`) for"
            " intervals and verdicts.\n"
        )
    lines = _sequential(analysis)
    how = method(analysis) + (
        "; after repeat: auto stopped, these assume a fixed number of trials" if lines else ""
    )
    lines.append(f"Compared with {baseline} ({trials} trials each; {how}):")
    width = max(len(c.change.metric.row) for c in compared) if compared else 0
    for db in databases[1:]:
        lines.append(f"  {db.label}")
        for item in (c for c in compared if c.database == db.id):
            c = item.change
            lines.append(
                f"    {c.metric.row:<{width}}  {describe_change(c)}"
                f"  n={c.baseline.n}+{c.other.n}  {c.verdict}"
            )
    return "\n".join(lines) + "\n"


_STOPPED = {
    "decided": "every stopping metric was decided",
    "max_trials": "it reached max_trials",
    "time_budget": "the time budget was spent",
}


def _sequential(analysis: Analysis) -> list[str]:
    """repeat: auto's decisions, which stand whenever the trials stopped."""
    summary = analysis.results.summary
    sequential = summary.sequential if summary is not None else None
    if sequential is None:
        return []
    lines = [
        f"repeat: auto stopped after {sequential.trials} trials each, as"
        f" {_STOPPED.get(sequential.stopped, sequential.stopped)} (at most"
        f" {sequential.max_trials}; equivalent: within ±{sequential.equivalence_pct:g}%;"
        " sequential intervals, valid however early the trials stopped):"
    ]
    width = max(len(look.row) for look in sequential.looks)
    for look in sequential.looks:
        interval = interval_text(look.low_pct, look.high_pct)
        change = f"{look.change_pct:+.1f}%" if look.change_pct is not None else "?"
        lines.append(
            f"  {look.database:<12} {look.row:<{width}}  {change:>8}  {interval:<18}"
            f"  after {look.trials}  {look.verdict}"
        )
    return lines


def change_parts(c: Change) -> tuple[str, str, str]:
    """The change in % ('+5.8%'), its 95% interval ('[-27.0%, +38.6%]', or ''
    without one) and the p-value ('p=0.644', 'p=?')."""
    interval = (
        f"[{c.low_pct:+.1f}%, {c.high_pct:+.1f}%]"
        if c.low_pct is not None and c.high_pct is not None
        else ""
    )
    p = f"p={c.p_value:.3f}" if c.p_value is not None else "p=?"
    return f"{c.change_pct:+.1f}%", interval, p


def describe_change(c: Change) -> str:
    """The change in %, its 95% interval and the p-value, in aligned columns."""
    change, interval, p = change_parts(c)
    return f"{change:>8}  {interval:<18}  {p:<8}"


def headline(analysis: Analysis) -> list[str]:
    """What differed and by how much, a line per database against the first:
    the answer a reader looks for before the full table. After repeat: auto,
    its decisions on the stopping metrics lead (their intervals stay valid
    however early the trials stopped), then the other metrics' verdicts, and
    how many trials it took and why they stopped."""
    databases, trials = analysis.databases, analysis.repeat
    found = _search_lines(analysis)
    if len(databases) < 2:
        return found or ["One database: nothing to compare; the table has its figures."]
    baseline = databases[0].label
    if trials < 2:
        return [
            f"One trial each: the table's differences against {baseline} cannot be"
            " judged; `repeat: auto` (or `--repeat 5`) gives intervals and verdicts."
        ]
    summary = analysis.results.summary
    sequential = summary.sequential if summary is not None else None
    lines = found + [_headline(analysis, db.id, db.label, baseline) for db in databases[1:]]
    if sequential is not None:
        lines.append(
            f"repeat: auto ran {sequential.trials} trials each and stopped because"
            f" {_STOPPED.get(sequential.stopped, sequential.stopped)}."
        )
    else:
        test = "a paired t-test over rounds" if paired(analysis) else "Welch's t-test"
        lines.append(f"{trials} trials each; 95% intervals, {test}.")
    return lines


def _search_lines(analysis: Analysis) -> list[str]:
    """A search's result per database: the highest rate that met the target
    (the trials' mean and interval), or that none did."""
    lines = []
    for db in analysis.databases:
        records = [t.record.search for t in db.trials if t.record.search is not None]
        if not records:
            continue
        target = f"p{records[0].percentile:g} within {records[0].slo_ms:g} ms"
        value = db.figures.values.get(SEARCH_ROWS[0])
        if isinstance(value, int | float):
            found = db.estimates.get(SEARCH_ROWS[0])
            spread = (
                f" ±{100 * found.relative_half_width:.1f}%"
                if found is not None and found.relative_half_width is not None
                else ""
            )
            lines.append(f"{db.label}: the highest rate with {target} is {value:,.0f}/s{spread}.")
        else:
            lines.append(f"{db.label}: no rate met {target} (see the notes).")
    return lines


def _headline(analysis: Analysis, database: str, label: str, baseline: str) -> str:
    """One database: repeat: auto's decisions, then every other significant
    change, then the compared metrics without a verdict."""
    summary = analysis.results.summary
    sequential = summary.sequential if summary is not None else None
    looks = [look for look in (sequential.looks if sequential else ()) if look.database == database]
    decided = {look.row for look in looks}
    found = [
        f"{look.row} {_pct(look.change_pct)} {interval_text(look.low_pct, look.high_pct)}"
        f" ({look.verdict})"
        for look in looks
    ]
    mine = [c.change for c in analysis.comparisons if c.database == database]
    found += [
        f"{c.metric.row} {_pct(c.change_pct)} {interval_text(c.low_pct, c.high_pct)} ({c.verdict})"
        for c in mine
        if c.verdict not in ("~", "?") and c.metric.row not in decided
    ]
    open_ = [c.metric.row for c in mine if c.verdict in ("~", "?") and c.metric.row not in decided]
    said = f"{label} against {baseline}: " + ("; ".join(found) if found else "no difference found")
    if open_:
        said += f"; no verdict on {', '.join(open_)}"
    return said + "."


def _pct(value: float | None) -> str:
    return f"{value:+.1f}%" if value is not None else "?"
