"""One step of a bisect: a version against the good end, as a ``repeat: auto``
run of the test case with just those two, deciding on the one metric.

The step is an ordinary run (``dbtester run``'s own code) into a results
directory of the bisect folder, so every step can be opened, re-analysed and
compared like any other run.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from dbtester.analyze.stats import METRICS, compare
from dbtester.bisect.record import StepRecord
from dbtester.bisect.search import Changed
from dbtester.config import DatabaseSpec, Loaded, TestCase
from dbtester.control import run_case
from dbtester.databases import get_kind
from dbtester.errors import InstallError, RunFailedError
from dbtester.results import ResultsDir, RunSummary
from dbtester.util.progress import Reporter

__all__ = [
    "Question",
    "aside",
    "classify",
    "direction",
    "run_step",
    "safe_name",
    "step_case",
]


def safe_name(text: str) -> str:
    """``text`` as a database id or a folder name: lower case, no odd signs."""
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._") or "x"


@dataclass(frozen=True)
class Question:
    """What is bisected: the test case with ``template`` as the database whose
    version varies, and the one metric that decides each step."""

    loaded: Loaded
    template: DatabaseSpec
    metric: str
    workers: int | None = None

    @property
    def digest(self) -> str:
        """The test case as far as it decides a step's figures: everything but
        the other databases and the template's version, id and heading."""
        raw = self.loaded.case.to_raw()
        index = self.loaded.case.databases.index(self.template)
        database = dict(raw["databases"][index])
        for key in ("id", "version", "description"):
            database.pop(key, None)
        raw["databases"] = [database]
        raw.pop("publish", None)
        text = json.dumps(raw, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def database_id(self, version: str) -> str:
        return safe_name(f"{self.template.kind}-{version}")


def step_case(question: Question, good: str, version: str) -> TestCase:
    """The test case of one step: the template at ``good`` then at ``version``,
    trials until ``metric`` is decided (the case's own budget when it has
    ``repeat: auto``), nothing published."""
    case = question.loaded.case
    kind = get_kind(question.template.kind)

    def at(v: str) -> DatabaseSpec:
        update = {"id": question.database_id(v), "version": v}
        return question.template.model_copy(
            update={**update, "description": kind.default_description(v)}
        )

    update: dict[str, object] = {
        "databases": (at(good), at(version)),
        "repeat": "auto",
        "stopping_metrics": (question.metric,),
        "publish": None,
        "title": f"{case.title} · {kind.name} {version} against {good}",
    }
    return case.model_copy(update=update)


def run_step(
    question: Question,
    good: str,
    version: str,
    folder: Path,
    reporter: Reporter,
    sign: float | None = None,
) -> StepRecord:
    """Install ``version``, run the step into ``folder`` and say what it found.
    ``sign`` is the ends' change (None for the ends' own step): a version that
    differs the other way is not changed. A version that cannot be installed
    or run is FAILED (skipped); the good end failing is RunFailedError."""
    kind = get_kind(question.template.kind)
    if question.template.embedded:
        try:
            kind.install(version, reporter)
        except InstallError as exc:
            return StepRecord(
                version=version, baseline=good, changed=Changed.FAILED.value, error=str(exc)
            )
    case = step_case(question, good, version)
    loaded = Loaded(case, question.loaded.source, question.loaded.legacy, ())
    # A step is read for its figures: its charts, drawn for every step, would
    # add seconds of CPU to each (`dbtester analyze` draws them on request).
    outcome = run_case(loaded, folder, workers=question.workers, reporter=reporter, charts=False)
    good_id, version_id = question.database_id(good), question.database_id(version)
    failed = outcome.failed
    if good_id in failed:
        raise RunFailedError(
            f"the good end, {kind.name} {good}, failed in {folder}: {failed[good_id]}"
        )
    if version_id in failed:
        return StepRecord(
            version=version,
            baseline=good,
            changed=Changed.FAILED.value,
            folder=folder.name,
            error=failed[version_id],
        )
    summary = ResultsDir(folder).read_summary()
    if summary is None:
        raise RunFailedError(f"{folder}: the step wrote no result.json")
    return _found(question, summary, good, version, folder.name, sign)


def _found(
    question: Question,
    summary: RunSummary,
    good: str,
    version: str,
    folder: str,
    sign: float | None,
) -> StepRecord:
    """The step's record from its result.json: the sequential look on the
    metric, Welch's p-value and both means."""
    version_id = question.database_id(version)
    look = next(
        (
            item
            for item in (summary.sequential.looks if summary.sequential else ())
            if item.database == version_id and item.row == question.metric
        ),
        None,
    )
    if look is None:
        raise RunFailedError(f"{folder}: no decision on {question.metric} was recorded")
    by_id = {db.id: db for db in summary.databases}

    def trials(db_id: str) -> list[float]:
        db = by_id.get(db_id)
        found = (_number(f.get(question.metric)) for f in db.trial_figures) if db else ()
        return [v for v in found if v is not None]

    def mean(db_id: str) -> float | None:
        db = by_id.get(db_id)
        return _number(db.figures.get(question.metric)) if db else None

    good_id = question.database_id(good)
    mine, theirs = trials(version_id), trials(good_id)
    # Welch's test over the step's trials, as `compare` gives it for any metric
    welch = compare(METRICS[question.metric], theirs, mine) if mine and theirs else None
    return StepRecord(
        version=version,
        baseline=good,
        changed=classify(look.state, look.change_pct, sign).value,
        state=look.state,
        folder=folder,
        verdict=look.verdict,
        change_pct=look.change_pct,
        low_pct=look.low_pct,
        high_pct=look.high_pct,
        p_value=welch.p_value if welch is not None else None,
        trials=look.trials,
        value=mean(version_id),
        baseline_value=mean(good_id),
    )


def classify(state: str, change_pct: float | None, sign: float | None) -> Changed:
    """A look's state as a bisect step's finding. ``sign``: the ends' change
    (None for the ends' own step); decidedly different the other way from
    the bad end counts as unchanged."""
    if state == "failed":
        return Changed.FAILED
    changed = {"different": Changed.YES, "equivalent": Changed.NO}.get(state, Changed.UNDECIDED)
    if changed is Changed.YES and sign is not None and (change_pct or 0.0) * sign < 0:
        return Changed.NO
    return changed


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def aside(folder: Path) -> Path:
    """An interrupted step's folder, moved out of the way (kept, not
    deleted): the step runs again from the start."""
    target = folder.with_name(f"{folder.name}.interrupted-{time.strftime('%Y%m%dT%H%M%S')}")
    folder.rename(target)
    return target


def direction(metric: str, change_pct: float) -> str:
    """ "a regression" or "an improvement", by the metric's better side."""
    return "a regression" if METRICS[metric].worse(change_pct) else "an improvement"
