"""``repeat: auto``: after each round of trials, whether the stopping metrics
are decided for every database against the first (analyze/sequential.py
says how), and so whether another round runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from dbtester.analyze import analyze
from dbtester.analyze.sequential import ALPHA, Look, interval_text, look
from dbtester.analyze.stats import METRICS
from dbtester.config import TestCase
from dbtester.results import LookRecord, ResultsDir, SequentialRecord

__all__ = ["Auto"]


@dataclass
class Auto:
    """The decisions so far; a decided metric stays decided."""

    case: TestCase
    out: Path
    decided: dict[tuple[str, str], Look] = field(default_factory=dict)
    latest: dict[tuple[str, str], Look] = field(default_factory=dict)
    pairs: list[tuple[str, str]] = field(default_factory=list)

    @property
    def alpha(self) -> float:
        """Each stopping metric's share of the 5%."""
        return ALPHA / len(self.case.stopping_metrics)

    def look(self) -> list[str]:
        """Looks at every trial so far; a line per database and metric."""
        analysis = analyze(ResultsDir(self.out).load())
        baseline, *others = analysis.databases
        lines = []
        for db in others:
            for row in self.case.stopping_metrics:
                key = (db.id, row)
                if key not in self.pairs:
                    self.pairs.append(key)
                if key in self.decided:
                    continue
                found = look(
                    baseline.values(row),
                    db.values(row),
                    max_trials=self.case.max_trials,
                    alpha=self.alpha,
                    equivalence_pct=self.case.equivalence,
                )
                self.latest[key] = found
                if found.state != "open":
                    self.decided[key] = found
                lines.append(f"repeat: auto: {db.id} against {baseline.id}: {_line(row, found)}")
        return lines

    def done(self) -> bool:
        return bool(self.pairs) and all(key in self.decided for key in self.pairs)

    def record(self, stopped: str, trials: int) -> SequentialRecord:
        baseline = self.case.databases[0].id
        looks = []
        for db_id, row in self.pairs:
            found = self.decided.get((db_id, row)) or self.latest[(db_id, row)]
            looks.append(
                LookRecord(
                    baseline=baseline,
                    database=db_id,
                    row=row,
                    trials=found.n,
                    change_pct=_finite(found.change_pct),
                    low_pct=_finite(found.low_pct),
                    high_pct=_finite(found.high_pct),
                    state=found.state,
                    verdict=verdict(row, found),
                )
            )
        return SequentialRecord(
            stopped=stopped,
            trials=trials,
            max_trials=self.case.max_trials,
            time_budget_s=self.case.time_budget,
            equivalence_pct=self.case.equivalence,
            looks=tuple(looks),
        )


def verdict(row: str, found: Look) -> str:
    """faster/slower/more/less, "equivalent", or "undecided"."""
    if found.state == "equivalent":
        return "equivalent"
    if found.state == "open":
        return "undecided"
    metric = METRICS[row]
    return metric.up if found.change_pct > 0 else metric.down


def _line(row: str, found: Look) -> str:
    interval = interval_text(found.low_pct, found.high_pct)
    return f"{row} {found.change_pct:+.1f}% {interval} after {found.n}: {verdict(row, found)}"


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
