"""Machine-readable output (``--json``) of ``validate``, ``compare`` and
``history``: one JSON document on stdout for scripts, in place of the text.

Each document is described by a JSON Schema (draft 2020-12) in
``dbtester/schemas/<command>.schema.json`` and carries ``"dbtester_json"``
(:data:`JSON_VERSION`) and ``"command"``. The version changes only when a
field is removed or changes meaning; new fields may appear without it, so a
script should ignore the fields it does not know.

Numbers that JSON cannot hold (a change against a mean of 0 is NaN) are
written as ``null``, so every document parses with a strict JSON reader.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # types only: `validate --json` must not load the statistics
    from dbtester.analyze.stats import Change, Estimate
    from dbtester.compare import Comparison
    from dbtester.config import Loaded, Workload
    from dbtester.errors import Problem
    from dbtester.history import Check, History
    from dbtester.history.changes import Changes

__all__ = [
    "JSON_VERSION",
    "Document",
    "compare_document",
    "history_document",
    "invalid_document",
    "validate_document",
]

#: the ``dbtester_json`` field of every document
JSON_VERSION = 1

Document = dict[str, Any]


def _header(command: str) -> Document:
    return {"dbtester_json": JSON_VERSION, "command": command}


def _number(value: float | None) -> float | None:
    """``value``, or None where JSON has no number for it (NaN, infinities)."""
    return value if value is not None and math.isfinite(value) else None


def _problem(problem: Problem) -> Document:
    return {
        "file": problem.file,
        "line": problem.line,
        "column": problem.column,
        "message": problem.message,
    }


# --------------------------------------------------------------------------- validate


def validate_document(path: str, loaded: Loaded, describe: Callable[[Workload], str]) -> Document:
    """A valid test case: its databases and workload; ``describe`` gives the
    one-line workload summary the text output shows."""
    case = loaded.case

    def workload(w: Workload) -> Document:
        return {
            "type": w.type,
            "requests": w.requests,
            "summary": describe(w),
            "settings": w.as_raw(),  # every key that means something for its type
        }

    databases = [
        {
            "id": db.id,
            "kind": db.kind,
            "version": db.version,
            "description": db.label,
            "members": db.member_count,
            "hosts": [host.model_dump(mode="json") for host in db.hosts],
            "endpoints": list(db.endpoints),
            "tls": "off" if db.tls is False else "run" if db.tls is True else "files",
            "user": getattr(db.auth, "who", None) or None,
            # the database's own workload only where it overrides the test case's
            "workload": workload(db.workload) if db.workload != case.workload else None,
        }
        for db in case.databases
    ]
    return {
        **_header("validate"),
        "path": path,
        "valid": True,
        "legacy": loaded.legacy,
        "title": case.title,
        "workload": workload(case.workload),
        "databases": databases,
        "repeat": case.repeat,
        "faults": [fault.describe() for fault in case.faults],
        "search": case.search.model_dump(mode="json") if case.search else None,
        "publish": case.publish.url if case.publish else None,
        "warnings": [_problem(p) for p in loaded.warnings],
        "problems": [],
    }


def invalid_document(path: str, problems: Sequence[Problem]) -> Document:
    """A test case that did not validate: every problem, located."""
    return {
        **_header("validate"),
        "path": path,
        "valid": False,
        "problems": [_problem(p) for p in problems],
    }


# --------------------------------------------------------------------------- compare


def _estimate(found: Estimate) -> Document:
    return {
        "mean": _number(found.mean),
        "trials": found.n,
        "sd": _number(found.sd),
        "half_width": _number(found.half_width),
    }


def _change(change: Change, before: str, after: str) -> Document:
    """One metric's comparison; ``before`` and ``after`` name its two sides."""
    return {
        "metric": change.metric.row,
        "better": change.metric.better,
        before: _estimate(change.baseline),
        after: _estimate(change.other),
        "change_pct": _number(change.change_pct),
        "low_pct": _number(change.low_pct),
        "high_pct": _number(change.high_pct),
        "p_value": _number(change.p_value),
        "verdict": change.verdict,
    }


def compare_document(comparison: Comparison) -> Document:
    """Every database in both directories, metric by metric, B against A."""
    threshold = comparison.threshold_pct
    databases = [
        {
            "id": a.id,
            "trials_a": len(a.trials),
            "trials_b": len(b.trials),
            "metrics": [
                {
                    **_change(item.change, "a", "b"),
                    "regression": comparison.is_regression(item),
                }
                for item in found
            ],
        }
        for a, b, found in comparison.compared
    ]
    return {
        **_header("compare"),
        "a": str(comparison.a),
        "b": str(comparison.b),
        "threshold_pct": threshold,
        "alpha": comparison.alpha,
        "environments": list(comparison.environments),
        "binaries": list(comparison.binaries),
        "databases": databases,
        "only_a": list(comparison.only_a),
        "only_b": list(comparison.only_b),
        "regressions": len(comparison.regressions),
    }


# --------------------------------------------------------------------------- history


def history_document(
    history: History,
    metrics: Sequence[str],
    check: Check | None,
    changes: Changes | None = None,
    gate: tuple[int, float] | None = None,
) -> Document:
    """The runs x metrics table (one entry per run and database); with
    ``--check``, each database's newest run against its baseline; with
    ``--changes``, where each series shifted (``gate``: --check's newest runs
    and threshold, which mark the shifts that are regressions)."""
    runs = []
    for run in history.runs:
        values: Document = {}
        for metric in metrics:
            found = run.estimate(metric)
            if found is not None:
                values[metric] = {
                    **_estimate(found),
                    "values": [_number(v) for v in run.values[metric]],  # one per trial
                }
        runs.append(
            {
                "run_id": run.run_id,
                "started": run.started.isoformat(),
                "started_unix": run.started_unix,
                "database": run.database,
                "kind": run.kind,
                "version": run.version,
                "metrics": values,
            }
        )
    return {
        **_header("history"),
        "source": history.source,
        "metrics": list(metrics),
        "converted": history.converted,
        "runs": runs,
        "check": None if check is None else _check(check),
        "changes": None if changes is None else _changes(history, changes, gate),
    }


def _changes(history: History, changes: Changes, gate: tuple[int, float] | None) -> Document:
    regressions = [] if gate is None else changes.regressions(history, *gate)
    points = [
        {
            "database": p.database,
            "run_id": p.run.run_id,
            "started": p.run.started.isoformat(),
            "kind": p.run.kind,
            "version": p.run.version,
            "root": p.root,
            "before_runs": [r.run_id for r in p.before],
            "after_runs": [r.run_id for r in p.after],
            **_change(p.change, "before", "after"),
            "regression": p in regressions,
        }
        for p in changes.points
    ]
    return {
        "points": points,
        "cuts": list(changes.cuts),
        "recent_runs": None if gate is None else gate[0],
        "threshold_pct": None if gate is None else gate[1],
        "regressions": len(regressions),
    }


def _check(check: Check) -> Document:
    verdicts = [
        {
            "database": v.database,
            "newest_run": v.newest,
            "baseline_runs": list(v.baseline),
            **_change(v.change, "baseline", "newest"),
            "regression": v.regression(check.threshold_pct),
        }
        for v in check.verdicts
    ]
    return {
        "threshold_pct": check.threshold_pct,
        "verdicts": verdicts,
        "skipped": list(check.skipped),
        "environments": list(check.environments),
        "regressions": len(check.regressions),
    }
