"""``dbtester run``: every database of a test case in turn, then the analysis.

A database that fails is recorded and the run goes on with the next one; the
run's outcome says which passed. Ctrl-C stops what runs, keeps the partial
results and renders them.
"""

from __future__ import annotations

import re
import secrets
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from dbtester import slowdisk
from dbtester.analyze.sequential import MIN_TRIALS
from dbtester.config import Loaded, TestCase
from dbtester.config.model import AUTO_ONLY_KEYS, DatabaseSpec
from dbtester.control.auto import Auto
from dbtester.control.database_run import run_database
from dbtester.control.environment import environment
from dbtester.control.slices import Slices, Turns
from dbtester.databases import get_kind
from dbtester.errors import BadInputError, DbtesterError, InterruptedRunError
from dbtester.render import render
from dbtester.results import DatabaseRecord, ResultsDir, RunSummary, SequentialRecord
from dbtester.util.paths import dbtester_home, ensure_writable
from dbtester.util.progress import Reporter

__all__ = ["RunOutcome", "default_out", "run_case", "select"]


@dataclass(frozen=True)
class RunOutcome:
    out: Path
    records: tuple[DatabaseRecord, ...]  # every database (and trial) that ran, in order
    table: str
    notes: tuple[str, ...] = ()  # what the table alone does not say
    comparison: str = ""  # each database against the first
    report: Path | None = None  # report.html (None when not drawn or the analysis failed)
    headline: tuple[str, ...] = ()  # what differed (the README's opening summary)

    @property
    def databases(self) -> list[str]:
        """The ids that ran, in order."""
        return list(dict.fromkeys(r.id for r in self.records))

    @property
    def failed(self) -> dict[str, str]:
        """Each database that failed in any trial, with its first error."""
        found: dict[str, str] = {}
        for r in self.records:
            if not r.passed and r.id not in found:
                found[r.id] = r.error if r.trial is None else f"trial {r.trial}: {r.error}"
        return found

    @property
    def passed(self) -> list[str]:
        failed = self.failed
        return [db_id for db_id in self.databases if db_id not in failed]


def default_out(case: TestCase) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    slug = re.sub(r"[^a-z0-9]+", "-", case.title.lower()).strip("-")[:40] or "run"
    return Path("results") / f"{stamp}-{slug}"


def select(case: TestCase, only: tuple[str, ...], local: bool) -> TestCase:
    """The databases to run: ``--only`` ids (checked), ``--local`` forcing the
    embedded default for entries that name hosts."""
    ids = [db.id for db in case.databases]
    unknown = [i for i in only if i not in ids]
    if unknown:
        raise BadInputError(
            f"--only: unknown database id(s) {', '.join(unknown)};"
            f" the test case has: {', '.join(ids)}"
        )
    chosen = [db for db in case.databases if not only or db.id in only]
    if local:
        chosen = [
            db.model_copy(update={"hosts": (), "members": db.member_count}) if db.hosts else db
            for db in chosen
        ]
    return case.model_copy(update={"databases": tuple(chosen)})


@dataclass
class _Trials:
    """Every database's trials, interleaved; with ``repeat: auto``, round
    after round until decided, ``max_trials`` or the time budget."""

    case: TestCase
    run_id: str
    store: ResultsDir
    scratch: Path
    workers: int | None
    reporter: Reporter
    records: list[DatabaseRecord] = field(default_factory=list)
    rounds: int = 0
    stopped: str = "max_trials"
    #: an exception a database's thread ended with (interleave: slices)
    crashed: BaseException | None = None

    def __post_init__(self) -> None:
        self.auto = Auto(self.case, self.store.root) if self.case.repeat == "auto" else None

    def run(self) -> None:
        if self.case.interleave == "slices":
            self._slices()
            return
        # Trials interleaved (A1 B1 A2 B2 ...): drift on the machine over the
        # minutes of a run falls on every database alike.
        began = time.monotonic()
        for number in range(1, self.case.trials + 1):
            self.rounds = number
            self._round(number)
            if self._enough(number, began):
                return

    def _enough(self, number: int, began: float) -> bool:
        """After round ``number``: with repeat: auto, whether its metrics are
        decided or its time budget spent."""
        if self.auto is None:
            return False
        if number >= MIN_TRIALS:
            for line in self.auto.look():
                self.reporter.say(line)
            if self.auto.done():
                self.stopped = "decided"
                return True
        budget = self.case.time_budget
        # Never before the first look: a budget spent sooner would leave
        # no verdict and no interval, only trials nobody judged.
        first_looked = number >= MIN_TRIALS
        if budget is not None and first_looked and time.monotonic() - began >= budget:
            if number < self.case.trials:
                self.stopped = "time_budget"
                self.reporter.say(f"repeat: auto: the time budget ({budget:g} s) is spent")
            return True
        return False

    def _slices(self) -> None:
        """interleave: slices: every cluster up, then rounds of slices, each
        round's order drawn at random (control.slices)."""
        case = self.case
        slices = Slices([db.id for db in case.databases], self._sliced, case.slice_s)
        try:
            slices.start()
            began = time.monotonic()
            for number in range(1, case.trials + 1):
                if not slices.ready:
                    break
                self.rounds = number
                order = slices.order()
                self.reporter.say(f"== round {number} of slices: {', then '.join(order)}")
                slices.round(number, order)
                if self._enough(number, began):
                    break
        except KeyboardInterrupt:
            slices.interrupt()
            raise
        slices.finish()
        if self.crashed is not None:
            raise self.crashed

    def _sliced(self, turns: Turns) -> None:
        """One database's thread: its cluster, its slices, its records."""
        case, db = self.case, self.case.database(turns.db_id)
        self.reporter.say(f"== {db.id}: {db.kind} {db.version} (slices of {case.slice_s:g} s)")
        try:
            records = self._database(db, fault_recovery_s=case.fault_recovery, turns=turns)
        except BaseException as exc:  # a bug: raised in the run's thread once all stopped
            self.crashed = exc
            return
        self.records.extend(records)  # one thread at a time: list.extend holds the GIL
        for failed in (r for r in records if not r.passed):
            self.reporter.say(f"{db.id} (slice {failed.trial}): FAILED: {failed.error}")

    def _database(self, db: DatabaseSpec, **keys: Any) -> tuple[DatabaseRecord, ...]:
        """run_database of ``db`` in this run, with ``keys``."""
        return run_database(
            db, self.run_id, self.store, self.scratch, self.workers, self.reporter, **keys
        )

    def _round(self, number: int) -> None:
        case = self.case
        trial = number if case.trials > 1 else None
        most = f"at most {case.max_trials}" if case.repeat == "auto" else str(case.repeat)
        for db in case.databases:
            of = f" (trial {number} of {most})" if trial else ""
            self.reporter.say(f"== {db.id}: {db.kind} {db.version}{of}")
            (record,) = self._database(
                db,
                trial=trial,
                faults=case.faults,
                fault_recovery_s=case.fault_recovery,
                search=case.search,
                load_hosts=case.load_hosts,
            )
            self.records.append(record)
            if not record.passed:
                self.reporter.say(f"{db.id}{of}: FAILED: {record.error}")

    def sequential(self) -> SequentialRecord | None:
        """How a ``repeat: auto`` run decided (None for any other run, or one
        stopped before its first look)."""
        if self.auto is None or not self.auto.pairs:
            return None
        return self.auto.record(self.stopped, self.rounds)


def _with_repeat(case: TestCase, repeat: int | Literal["auto"], reporter: Reporter) -> TestCase:
    """``case`` with ``--repeat``'s value. A number in place of the case's
    repeat: auto sets the auto-only keys back to their defaults, and says so:
    they would mean nothing, and the config.yaml the run writes must validate."""
    if repeat == "auto" and case.search is not None:
        raise BadInputError(
            "--repeat auto cannot run a search (its trials stop on table rows a search"
            " does not decide): give --repeat a number"
        )
    if repeat == "auto" and len(case.databases) < 2:
        raise BadInputError(
            "--repeat auto runs trials until each database's difference from the first"
            " is decided: it needs at least two databases"
        )
    update: dict[str, object] = {"repeat": repeat}
    if repeat != "auto" and case.repeat == "auto":
        fields = type(case).model_fields
        unused = [k for k in AUTO_ONLY_KEYS if getattr(case, k) != fields[k].default]
        update |= {k: fields[k].default for k in AUTO_ONLY_KEYS}
        if unused:
            reporter.say(
                f"--repeat {repeat} replaces the test case's repeat: auto; its"
                f" {', '.join(unused)} not used"
            )
    return case.model_copy(update=update)


def run_case(
    loaded: Loaded,
    out: Path,
    *,
    workers: int | None = None,
    reporter: Reporter | None = None,
    repeat: int | Literal["auto"] | None = None,
    charts: bool = True,
) -> RunOutcome:
    """Run every database of the test case, ``repeat`` times (default: the
    case's ``repeat``) interleaved, then render the results (the charts and
    report.html only with ``charts``)."""
    case = loaded.case
    reporter = reporter or Reporter()
    if repeat is not None:
        case = _with_repeat(case, repeat, reporter)
    # Disk trouble is found here, before anything starts, not mid-run.
    ensure_writable(dbtester_home(), "$DBTESTER_HOME")
    if out.exists() and out.is_dir() and any(out.iterdir()):
        # Bad input (exit 2): a run never mixes its files into another's.
        raise BadInputError(
            f"{out} exists and is not empty: choose another --out, or remove {out} first"
        )
    ensure_writable(out, "--out")
    # Everything the embedded databases need is installed before anything starts.
    for db in case.databases:
        if db.embedded:
            for version in case.versions_of(db):
                get_kind(db.kind).install(version, reporter)
    if slowdisk.needed(case) and any(db.embedded for db in case.databases):
        slowdisk.install(reporter)  # the slow-disk layer the local agents mount
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
    scratch = dbtester_home() / "runs" / run_id
    store = ResultsDir(out)
    store.write_config(case.to_raw())
    started = RunSummary(
        run_id=run_id,
        source=loaded.source,
        started_unix=time.time(),
        environment=environment(scratch),
    )
    store.write_summary(started)
    trials = _Trials(case, run_id, store, scratch, workers, reporter)
    interrupted = False
    try:
        trials.run()
    except KeyboardInterrupt:
        interrupted = True
    if (sequential := trials.sequential()) is not None:
        store.write_summary(started.model_copy(update={"sequential": sequential}))
    records = trials.records
    table, comparison = "", ""
    notes: tuple[str, ...] = ()
    opening: tuple[str, ...] = ()
    report = None
    try:
        rendered = render(out, charts=charts)
        table, notes = rendered.table, tuple(rendered.analysis.notes)
        comparison, report = rendered.comparison, rendered.report
        opening = rendered.headline
    except DbtesterError as exc:
        reporter.say(f"analysis: {exc}")
    if interrupted:
        raise InterruptedRunError(f"interrupted; partial results kept in {out}")
    outcome = RunOutcome(out, tuple(records), table, notes, comparison, report, opening)
    if not outcome.failed:
        # Agent logs were fetched into the results; failed runs keep their scratch
        # (and the archived data dirs in it) for a post-mortem.
        shutil.rmtree(scratch, ignore_errors=True)
    return outcome
