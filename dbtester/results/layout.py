"""Where everything in a results directory lives: every path is a property
here, and no other module spells a results file name.

::

    DIR/config.yaml                  the resolved test case that ran
    DIR/result.json                  the summary (RunSummary), schema-versioned
    DIR/summary.txt, summary.csv     the combined table
    DIR/comparison.txt               each database against the first (2+ databases)
    DIR/README.md                    title, notes, table, charts
    DIR/charts/<NAME>.svg            one chart per metric
    DIR/report.html                  the interactive report: one self-contained page
    DIR/<db-id>/run.json             one database's record (DatabaseRecord)
    DIR/<db-id>/client-latency.npz   every request (Records)
    DIR/<db-id>/client-metrics.csv   the load generator's own resource use
    DIR/<db-id>/watch-events.npz     type: watch: every event each watcher received
    DIR/<db-id>/check-history.npz    check: every checked client's operations
    DIR/<db-id>/server-<i>-metrics.csv, -database.log, -agent.log   per member
    DIR/<db-id>/server-<i>-<name>-metrics.csv, -<name>.log   a member's companion
                                     server (kine's PostgreSQL: name postgres)
    DIR/parquet/<table>/database=<db-id>/date=<YYYY-MM-DD>/<run-id>.parquet
                                     figures, requests and per-second series as
                                     Parquet (dbtester.results.columnar)

With ``search:`` each probe's client-latency.npz and client-metrics.csv are
in ``probe-<n>/`` beside the trial's files, which hold the highest passing
probe's.

With ``repeat: N`` (N > 1) each trial of a database keeps the files above
that sit in ``DIR/<db-id>/`` in ``DIR/<db-id>/trial-<k>/`` instead (k = 1..N).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DatabaseLayout", "ResultsLayout"]

_SERVER_FILE = re.compile(r"^server-(\d+)-metrics\.csv$")
#: a member's companion server's samples (kine's PostgreSQL): server-<i>-<name>-metrics.csv
_COMPANION_FILE = re.compile(r"^server-(\d+)-([a-z][a-z0-9_]{0,31})-metrics\.csv$")
_TRIAL_DIR = re.compile(r"^trial-([1-9][0-9]{0,5})$")


@dataclass(frozen=True)
class DatabaseLayout:
    """``DIR/<db-id>/``: one database's raw data."""

    root: Path

    @property
    def record(self) -> Path:
        return self.root / "run.json"

    @property
    def requests(self) -> Path:
        return self.root / "client-latency.npz"

    @property
    def client_metrics(self) -> Path:
        return self.root / "client-metrics.csv"

    def load_host_requests(self, index: int) -> Path:
        """Load host ``index``'s own records, on the controller's clock
        (``load_hosts:``; ``requests`` holds every host's, merged)."""
        return self.root / f"client-{index}-latency.npz"

    def load_host_metrics(self, index: int) -> Path:
        """Load host ``index``'s samples, on the controller's clock (``load_hosts:``)."""
        return self.root / f"client-{index}-metrics.csv"

    @property
    def check_history(self) -> Path:
        """The checked clients' operations (CheckedOperations)."""
        return self.root / "check-history.npz"

    @property
    def informer_lags(self) -> Path:
        """A Kubernetes load's informers' event lags (InformerLags)."""
        return self.root / "informer-lags.npz"

    @property
    def lock_holds(self) -> Path:
        """A lock load's acquisitions (LockHolds)."""
        return self.root / "lock-holds.npz"

    @property
    def watch_events(self) -> Path:
        """A watch load's events, per watcher (WatchEvents)."""
        return self.root / "watch-events.npz"

    def server_metrics(self, member: int) -> Path:
        return self.root / f"server-{member}-metrics.csv"

    def server_log(self, member: int) -> Path:
        return self.root / f"server-{member}-database.log"

    def agent_log(self, member: int) -> Path:
        return self.root / f"server-{member}-agent.log"

    def companion_metrics(self, member: int, name: str) -> Path:
        """The samples of member ``member``'s companion server ``name``."""
        return self.root / f"server-{member}-{name}-metrics.csv"

    def companion_log(self, member: int, name: str) -> Path:
        return self.root / f"server-{member}-{name}.log"

    def worker_part(self, worker: int) -> Path:
        """A load worker's records before they are merged (removed afterwards)."""
        return self.root / f".worker-{worker}.npz"

    def probe(self, number: int) -> DatabaseLayout:
        """Probe ``number`` of a search (``<trial dir>/probe-<n>/``): its requests
        and client metrics."""
        return DatabaseLayout(self.root / f"probe-{number}")

    def trial(self, number: int) -> DatabaseLayout:
        """Trial ``number`` of a repeated run (``DIR/<db-id>/trial-<k>/``)."""
        return DatabaseLayout(self.root / f"trial-{number}")

    def trial_numbers(self) -> list[int]:
        """The trials present below this database's directory, in order."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            if (match := _TRIAL_DIR.match(path.name)) and path.is_dir():
                found.append(int(match[1]))
        return sorted(found)

    def server_metric_files(self) -> list[tuple[int, Path]]:
        """(member index, path) of every server metrics file present, by index."""
        found = []
        for path in self.root.glob("server-*-metrics.csv"):
            if match := _SERVER_FILE.match(path.name):
                found.append((int(match[1]), path))
        return sorted(found)

    def companion_metric_files(self) -> list[tuple[int, str, Path]]:
        """(member index, companion name, path) of every companion's samples present."""
        found = []
        for path in self.root.glob("server-*-*-metrics.csv"):
            if match := _COMPANION_FILE.match(path.name):
                found.append((int(match[1]), match[2], path))
        return sorted(found)


@dataclass(frozen=True)
class ResultsLayout:
    """A results directory, as ``dbtester run`` writes it."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def summary(self) -> Path:
        return self.root / "result.json"

    @property
    def table(self) -> Path:
        return self.root / "summary.txt"

    @property
    def table_csv(self) -> Path:
        return self.root / "summary.csv"

    @property
    def comparison(self) -> Path:
        return self.root / "comparison.txt"

    @property
    def readme(self) -> Path:
        return self.root / "README.md"

    @property
    def charts(self) -> Path:
        return self.root / "charts"

    def chart(self, name: str) -> Path:
        return self.charts / f"{name}.svg"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def parquet_root(self) -> Path:
        return self.root / "parquet"

    def parquet(self, table: str, db_id: str, date: str, run_id: str) -> Path:
        """One database's Parquet file of ``table``, partitioned Hive-style by
        database id and the run's UTC date (engines skip folders by them)."""
        folder = self.parquet_root / table / f"database={db_id}" / f"date={date}"
        return folder / f"{run_id or 'run'}.parquet"

    def database(self, db_id: str, trial: int | None = None) -> DatabaseLayout:
        """A database's files; with ``trial``, those of that trial of a repeated run."""
        layout = DatabaseLayout(self.root / db_id)
        return layout if trial is None else layout.trial(trial)

    @property
    def index_files(self) -> tuple[str, ...]:
        """Published last, in this order: whoever finds the summary in a bucket
        finds everything the README links to."""
        return (self.readme.name, self.summary.name)

    def relative(self, path: Path) -> str:
        """``path`` as a POSIX path relative to the directory (a key below a URL)."""
        return path.relative_to(self.root).as_posix()
