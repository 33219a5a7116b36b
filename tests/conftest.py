"""Shared fixtures: running the CLI in-process, and where test cases live."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dbtester.cli import main
from dbtester.util import net
from tests.support.home import home_at

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
# Test cases in the original (Go) dbtester format, written for these tests.
LEGACY = ROOT / "tests" / "fixtures" / "legacy"


def pytest_configure(config: pytest.Config) -> None:
    """Parallel workers (pytest -n, pytest-xdist) pick member ports from
    their own slices: two processes could otherwise find the same port free
    at the same moment and both hand it to a database."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2 or os.environ.get(net.PORT_RANGE_ENV):
        return
    # the ports free_port picks from (below the ephemeral range), shared out
    first, last = net.pick_range()
    index, span = int(worker[2:]), (last + 1 - first) // count
    low = first + index * span
    os.environ[net.PORT_RANGE_ENV] = f"{low}-{low + span - 1}"


#: the longest test files, longest first (their seconds under two workers
#: in CI, measured with --durations=0 on 2026-11-28: 259, 113, 113, 110,
#: 107, 93, 89, 85, 80, 67, 65, 60, 60, 59), run first: with each file whole
#: in one worker (--dist loadfile), a long one handed out last leaves the
#: other worker idle at the end
LONGEST_FIRST = (
    "tests/integration/test_multihost.py",
    "tests/e2e/test_fault_suite.py",
    "tests/e2e/test_watch.py",
    "tests/e2e/test_failover.py",
    "tests/integration/test_history.py",
    "tests/e2e/test_search.py",
    "tests/e2e/test_maintenance.py",
    "tests/e2e/test_tls.py",
    "tests/e2e/test_run.py",
    "tests/integration/test_engine_failover.py",
    "tests/integration/test_load.py",
    "tests/unit/test_trials.py",
    "tests/e2e/test_trials.py",
    "tests/e2e/test_check.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first, the rest in their order (a stable sort)."""

    def rank(item: pytest.Item) -> int:
        path = Path(str(item.fspath)).relative_to(ROOT).as_posix()
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run ``dbtester ARGS`` through the real entry point; return code and output."""

    def run(*args: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["dbtester", *args])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture(scope="session")
def shared_home() -> Iterator[Path]:
    home = Path(os.environ.get("DBTESTER_TEST_HOME") or Path.home() / ".cache" / "dbtester-tests")
    home.mkdir(parents=True, exist_ok=True)
    runs = home / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    yield home
    # Runs that fail on purpose keep their scratch (with archived data dirs) for
    # a post-mortem; the tests' own would pile up in the shared home. One still
    # being written to belongs to another test session sharing this home (its
    # agents append to metrics.csv every second): never pulled from under it.
    for leftover in (set(runs.iterdir()) if runs.exists() else set()) - before:
        if not _changed_within(leftover, 120.0):
            shutil.rmtree(leftover, ignore_errors=True)


def _changed_within(root: Path, seconds: float) -> bool:
    newest = 0.0
    for path in [root, *root.rglob("*")]:
        with contextlib.suppress(OSError):
            newest = max(newest, path.stat().st_mtime)
    return time.time() - newest < seconds


@pytest.fixture
def use_shared_home(shared_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DBTESTER_HOME", str(shared_home))
    return shared_home


@pytest.fixture(scope="session")
def installed_home(shared_home: Path) -> Callable[[str, str], str]:
    """Install KIND@VERSION into the shared test home (once per machine) and
    return that home, for agents started with DBTESTER_HOME pointing at it."""
    from dbtester.databases import get_kind
    from dbtester.util.progress import Reporter

    def install(kind: str, version: str) -> str:
        with home_at(shared_home):
            get_kind(kind).install(version, Reporter())
        return str(shared_home)

    return install
