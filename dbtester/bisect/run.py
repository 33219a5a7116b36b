"""``dbtester bisect``: the released versions between a good and a bad one,
halved step by step until the first with the change is named.

Every step is kept in the bisect folder and recorded in its ``bisect.json``
as soon as it ends; run again, the same command reads the finished steps
back and goes on with the next (an interrupted step runs again from the
start, its partial folder kept aside).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dbtester.analyze.sequential import interval_text
from dbtester.analyze.stats import METRICS
from dbtester.bisect import record as records
from dbtester.bisect.record import BisectRecord, StepRecord
from dbtester.bisect.search import (
    Changed,
    Decision,
    Found,
    NotReproduced,
    Stuck,
    Try,
    between,
    is_release,
    next_step,
    steps_left,
    version_key,
)
from dbtester.bisect.steps import Question, aside, classify, direction, run_step, safe_name
from dbtester.config import DatabaseSpec, Loaded
from dbtester.config.model import VERSION_PATTERN
from dbtester.databases import get_kind
from dbtester.errors import BadInputError, InterruptedRunError, RunFailedError
from dbtester.install import SourceUnavailable, list_installed
from dbtester.util.progress import Reporter

__all__ = ["BisectOptions", "BisectOutcome", "bisect", "default_folder"]


@dataclass(frozen=True)
class BisectOptions:
    good: str
    bad: str
    metric: str
    kind: str | None = None  # None: the test case's only kind
    versions: tuple[str, ...] = ()  # the range given by hand (else: listed)
    workers: int | None = None


@dataclass(frozen=True)
class BisectOutcome:
    folder: Path
    record: BisectRecord
    decision: Decision
    table: str  # the versions tried, for the terminal
    conclusion: str  # one line: what was found, or why nothing was


def default_folder(loaded: Loaded, options: BisectOptions, kind: str) -> Path:
    """The same command always names the same folder, so running it again
    resumes."""
    title = safe_name(loaded.case.title)[:30]
    return Path("results") / safe_name(f"bisect-{title}-{kind}-{options.metric}")


def choose_template(loaded: Loaded, kind: str | None) -> DatabaseSpec:
    """The test case's first database of ``kind`` (its only kind when None)."""
    case = loaded.case
    kinds = list(dict.fromkeys(db.kind for db in case.databases))
    if kind is None:
        if len(kinds) > 1:
            raise BadInputError(f"--kind: the test case has {', '.join(kinds)}; choose one")
        kind = kinds[0]
    for db in case.databases:
        if db.kind == kind:
            if db.endpoints:
                raise BadInputError(
                    f"database {db.id} is an already-running cluster (endpoints): a bisect"
                    " starts each version itself"
                )
            return db
    raise BadInputError(f"--kind {kind}: the test case has no such database; it has {kinds}")


def check_options(loaded: Loaded, options: BisectOptions) -> None:
    if options.metric not in METRICS:
        raise BadInputError(
            f"--metric {options.metric!r} is not a metric; allowed: {', '.join(METRICS)}"
        )
    for name, value in (("--good", options.good), ("--bad", options.bad)):
        if not re.match(VERSION_PATTERN, value):
            raise BadInputError(f"{name} {value!r} is not a version")
    if options.good == options.bad:
        raise BadInputError("--good and --bad name the same version")
    if not options.versions:
        for name, value in (("--good", options.good), ("--bad", options.bad)):
            if not is_release(value):
                raise BadInputError(
                    f"{name} {value}: only released versions (numbers and dots) are listed;"
                    " give the range with --versions"
                )
        if version_key(options.good) >= version_key(options.bad):
            raise BadInputError(
                f"--good {options.good} must be older than --bad {options.bad}"
                " (the change is looked for in the versions after the good one)"
            )
    if loaded.case.search is not None:
        raise BadInputError(
            "a bisect's steps are repeat: auto runs, which cannot run a search: remove"
            " search: from the test case"
        )


def versions_between(kind: str, options: BisectOptions, reporter: Reporter) -> list[str]:
    """The range: the good end, what lies between, the bad end."""
    if options.versions:
        return given_range(options.versions, options.good, options.bad)
    try:
        listed = get_kind(kind).released_versions()
    except SourceUnavailable as exc:
        reporter.say(
            f"bisect: cannot list {kind}'s released versions ({exc}); using those installed"
        )
        listed = []
    installed = [item.version for item in list_installed() if item.kind == kind]
    return between([*listed, *installed], options.good, options.bad)


def given_range(given: Sequence[str], good: str, bad: str) -> list[str]:
    """``--versions``, oldest first: those between the ends where the list
    names them, all of it where it does not."""
    listed = list(dict.fromkeys(given))
    low = listed.index(good) + 1 if good in listed else 0
    high = listed.index(bad) if bad in listed else len(listed)
    if high < low:
        raise BadInputError(f"--versions lists --bad {bad} before --good {good}: oldest first")
    inside = [v for v in listed[low:high] if v not in (good, bad)]
    return [good, *inside, bad]


@dataclass
class _Bisect:
    question: Question
    folder: Path
    versions: list[str]
    reporter: Reporter
    record: BisectRecord

    def found(self) -> dict[str, Changed]:
        """Each tried version's finding, against these ends (a step read back
        from another bisect of the same folder is judged by this one's)."""
        good, bad = self.versions[0], self.versions[-1]
        sign = self.sign()
        return {
            s.version: classify(s.state, s.change_pct, None if s.version == bad else sign)
            for s in self.record.steps
            if s.baseline == good
        }

    def step(self, version: str) -> StepRecord | None:
        good = self.versions[0]
        return next(
            (s for s in self.record.steps if s.baseline == good and s.version == version), None
        )

    def sign(self) -> float | None:
        ends = self.step(self.versions[-1])
        return ends.change_pct if ends is not None else None

    def run(self) -> Decision:
        while True:
            decision = next_step(self.versions, self.found())
            if not isinstance(decision, Try):
                return decision
            self._progress(decision)
            self._keep(self._run(decision.version))

    def _progress(self, step: Try) -> None:
        ends = step.version == self.versions[-1]
        todo = steps_left(step.left) + (1 if ends else 0)
        what = "the two ends (does the change reproduce?)" if ends else step.version
        self.reporter.say(
            f"bisect: {self.question.template.kind} {step.low} .. {step.high}:"
            f" {step.left} version(s) between; about {todo} step(s) to go; now {what}"
        )

    def _run(self, version: str) -> StepRecord:
        good = self.versions[0]
        folder = self.folder / safe_name(f"{good}-vs-{version}")
        if folder.exists():
            kept = aside(folder)
            self.reporter.say(f"bisect: an unfinished step was kept aside: {kept}")
        is_end = version == self.versions[-1]
        try:
            done = run_step(
                self.question, good, version, folder, self.reporter, None if is_end else self.sign()
            )
        except InterruptedRunError as exc:
            raise InterruptedRunError(
                f"{exc}; the finished steps are in {self.folder}: the same command resumes"
            ) from None
        if is_end and done.changed == Changed.FAILED.value:
            raise RunFailedError(f"the bad end, {version}, could not run: {done.error}")
        self.reporter.say(f"bisect: {version}: {_finding(self.question.metric, done, good)}")
        return done

    def _keep(self, done: StepRecord) -> None:
        kept = [
            s for s in self.record.steps if (s.baseline, s.version) != (done.baseline, done.version)
        ]
        self.record = self.record.model_copy(update={"steps": (*kept, done)})
        records.write(self.folder, self.record)


def bisect(
    loaded: Loaded, options: BisectOptions, out: Path | None, reporter: Reporter | None = None
) -> BisectOutcome:
    """Locate the first version between ``options.good`` and ``options.bad``
    whose ``options.metric`` differs from the good one's as the bad one's
    does."""
    reporter = reporter or Reporter()
    check_options(loaded, options)
    template = choose_template(loaded, options.kind)
    question = Question(loaded, template, options.metric, options.workers)
    folder = out or default_folder(loaded, options, template.kind)
    wanted = BisectRecord(config_sha256=question.digest, kind=template.kind, metric=options.metric)
    have = records.read(folder)
    if have is None:
        if folder.exists() and any(folder.iterdir()):
            raise BadInputError(f"{folder} exists and is not a bisect folder: choose another --out")
        have = wanted
    records.check_same_question(have, wanted, folder)
    versions = versions_between(template.kind, options, reporter)
    if len(versions) < 3:
        reporter.say(
            f"bisect: no released version lies between {options.good} and {options.bad};"
            " the two ends are compared only"
        )
    start = have.model_copy(
        update={
            "good": options.good,
            "bad": options.bad,
            "versions": tuple(versions),
            # Install failures are tried again: only steps that ran are reused.
            "steps": tuple(s for s in have.steps if s.folder is not None),
        }
    )
    reused = sum(1 for s in start.steps if s.baseline == options.good and s.version in versions)
    if reused:
        reporter.say(f"bisect: {reused} finished step(s) in {folder} are reused")
    work = _Bisect(question, folder, versions, reporter, start)
    decision = work.run()
    conclusion = conclude(decision, work, options.metric)
    final = work.record.model_copy(update={"result": conclusion})
    records.write(folder, final)
    table = render_table(final, versions)
    return BisectOutcome(folder, final, decision, table, conclusion)


def _finding(metric: str, step: StepRecord, good: str) -> str:
    if step.changed == Changed.FAILED.value:
        return f"skipped: {step.error}"
    change = f"{step.change_pct:+.1f}%" if step.change_pct is not None else "?"
    interval = interval_text(step.low_pct, step.high_pct)
    return (
        f"{metric} {step.verdict} {change} {interval} against {good}"
        f" after {step.trials} trial(s): {step.changed}"
    )


def conclude(decision: Decision, work: _Bisect, metric: str) -> str:
    good, bad = work.versions[0], work.versions[-1]
    kind = work.question.template.kind
    if isinstance(decision, Found):
        step = work.step(decision.first)
        assert step is not None
        p = f", p = {step.p_value:.3g}" if step.p_value is not None else ""
        change = step.change_pct if step.change_pct is not None else 0.0
        maybe = (
            f" (or one of {', '.join(decision.skipped)}, which could not run)"
            if decision.skipped
            else ""
        )
        return (
            f"first version with {direction(metric, change)}: {kind} {decision.first}{maybe}:"
            f" {metric} {change:+.1f}% {interval_text(step.low_pct, step.high_pct)}"
            f" against {good}{p}; the last without it: {decision.last_without}"
        )
    ends = work.step(bad)
    if isinstance(decision, NotReproduced):
        assert ends is not None
        figures = _figures(metric, ends, good)
        how = "stayed undecided" if decision.bad is Changed.UNDECIDED else "is equivalent"
        return (
            f"the change did not reproduce: {kind} {bad} against {good} on {metric} {how}"
            f" ({_finding(metric, ends, good)}){figures}"
        )
    assert isinstance(decision, Stuck)
    return (
        f"stopped: {kind} {decision.version} stayed undecided at its trial budget; the change"
        f" is after {decision.low} and at or before {decision.high} (raise max_trials or"
        " time_budget in the test case, then run the same command again)"
    )


def _figures(metric: str, step: StepRecord, good: str) -> str:
    if step.value is None or step.baseline_value is None:
        return ""
    return f"; means: {good} {step.baseline_value:.6g}, {step.version} {step.value:.6g}"


def render_table(record: BisectRecord, versions: Sequence[str]) -> str:
    """The versions tried, oldest first, each against the good end."""
    good = versions[0]
    tried = {s.version: s for s in record.steps if s.baseline == good}
    header = ("version", f"{record.metric} against {good}", "p", "trials", "found", "folder")
    rows = [header]
    for version in versions[1:]:
        step = tried.get(version)
        if step is None:
            continue
        if step.changed == Changed.FAILED.value:
            rows.append((version, "could not run", "", "", "skipped", step.folder or ""))
            continue
        change = f"{step.change_pct:+.1f}%" if step.change_pct is not None else "?"
        against = f"{step.verdict} {change} {interval_text(step.low_pct, step.high_pct)}"
        p = f"{step.p_value:.3g}" if step.p_value is not None else ""
        rows.append((version, against, p, str(step.trials), step.changed, step.folder or ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines) + "\n"
