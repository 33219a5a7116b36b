"""``dbtester run``: every database of a test case in turn, then the analysis.

A database that fails is recorded and the run goes on with the next one; the
run's exit code says whether all passed. Ctrl-C stops what runs, keeps the
partial results and renders them.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import click
import yaml

from dbtester.agent.config import ensure_writable
from dbtester.analyze import analyze
from dbtester.config import Loaded, TestCase
from dbtester.control.environment import environment
from dbtester.control.session import DatabaseRun
from dbtester.databases import get_kind
from dbtester.errors import DbtesterError
from dbtester.install import Reporter, dbtester_home

__all__ = ["RunFailedError", "RunInterruptedError", "RunOutcome", "default_out", "run_case"]


class RunFailedError(DbtesterError):
    """Some database failed; its results and the others' are still on disk."""


class RunInterruptedError(DbtesterError):
    exit_code = 130


class RunOutcome:
    def __init__(self, out: Path, passed: list[str], failed: dict[str, str], table: str) -> None:
        self.out = out
        self.passed = passed
        self.failed = failed
        self.table = table


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
        raise click.BadParameter(
            f"unknown database id(s) {', '.join(unknown)}; the test case has: {', '.join(ids)}",
            param_hint="--only",
        )
    chosen = [db for db in case.databases if not only or db.id in only]
    if local:
        chosen = [
            db.model_copy(update={"hosts": (), "members": db.member_count}) if db.hosts else db
            for db in chosen
        ]
    return case.model_copy(update={"databases": tuple(chosen)})


def run_case(loaded: Loaded, out: Path, *, workers: int | None = None) -> RunOutcome:
    case = loaded.case
    reporter = Reporter()
    # Disk trouble is found here, before anything starts, not mid-run.
    ensure_writable(dbtester_home(), "$DBTESTER_HOME")
    if out.exists() and out.is_dir() and any(out.iterdir()):
        raise DbtesterError(f"{out} exists and is not empty; choose another --out")
    ensure_writable(out, "--out")
    # Everything the embedded databases need is installed before anything starts.
    for db in case.databases:
        if db.embedded:
            get_kind(db.kind).install(db.version, reporter)
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
    scratch = dbtester_home() / "runs" / run_id
    (out / "config.yaml").write_text(yaml.safe_dump(case.to_raw(), sort_keys=False))
    result = {
        "schema_version": 1,
        "run_id": run_id,
        "source": loaded.source,
        "started_unix": time.time(),
        "environment": environment(scratch),
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    passed: list[str] = []
    failed: dict[str, str] = {}
    interrupted = False
    try:
        for db in case.databases:
            reporter.say(f"== {db.id}: {db.kind} {db.version}")
            session = DatabaseRun(db, run_id, out / db.id, scratch, workers, reporter)
            if session.run():
                passed.append(db.id)
            else:
                failed[db.id] = session.error
                reporter.say(f"{db.id}: FAILED: {session.error}")
    except KeyboardInterrupt:
        interrupted = True
    table = ""
    try:
        table = analyze(out).table
    except DbtesterError as exc:
        reporter.say(f"analysis: {exc}")
    if interrupted:
        raise RunInterruptedError(f"interrupted; partial results kept in {out}")
    if not failed:
        # Agent logs were fetched into the results; failed runs keep their scratch
        # (and the archived data dirs in it) for a post-mortem.
        shutil.rmtree(scratch, ignore_errors=True)
    return RunOutcome(out, passed, failed, table)


def print_outcome(outcome: RunOutcome) -> None:
    click.echo(outcome.table, nl=False)
    click.echo(f"results: {outcome.out}", file=sys.stderr)
    if outcome.failed:
        lines = "\n".join(f"  {k}: {v}" for k, v in outcome.failed.items())
        raise RunFailedError(
            f"{len(outcome.failed)} of {len(outcome.failed) + len(outcome.passed)}"
            f" databases failed (results kept in {outcome.out}):\n{lines}"
        )
