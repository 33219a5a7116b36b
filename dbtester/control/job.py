"""What one database's run is asked to do, fixed before it starts: the input
every phase of :func:`~dbtester.control.database_run.run_database` shares."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dbtester.config.faults import Fault
from dbtester.config.model import DEFAULT_FAULT_RECOVERY_S, DatabaseSpec, Host
from dbtester.config.search import Search
from dbtester.control.slices import Turns
from dbtester.databases import get_kind
from dbtester.databases.base import PLAIN, Access, DatabaseKind, LoadSettings
from dbtester.errors import DbtesterError
from dbtester.load import LoadOptions
from dbtester.results import DatabaseLayout, ResultsDir
from dbtester.util.progress import Reporter

__all__ = ["DatabaseJob"]


@dataclass(frozen=True)
class DatabaseJob:
    """One database (``trial`` k of a repeated run: a fresh cluster of its
    own) of run ``run_id``, its files in ``store``."""

    db: DatabaseSpec
    run_id: str
    store: ResultsDir
    #: where embedded agents keep their members (this trial's own)
    scratch: Path
    reporter: Reporter
    #: engine threads (None: the load's default)
    workers: int | None = None
    trial: int | None = None
    #: applied during the load
    faults: tuple[Fault, ...] = ()
    #: a load under faults fails when no request succeeds for this long
    fault_recovery_s: float = DEFAULT_FAULT_RECOVERY_S
    #: the test case's search (None: one load at the workload's rate)
    search: Search | None = None
    #: the agents that share the measured load (none: this process runs it)
    load_hosts: tuple[Host, ...] = ()
    #: interleave: slices: when this database's measured load takes its
    #: turns (None: it runs once, as a trial)
    turns: Turns | None = None

    @property
    def agent_run_id(self) -> str:
        """The run id the agents know: each trial's members apart, so each
        gets a fresh data dir."""
        return self.run_id if self.trial is None else f"{self.run_id}-t{self.trial}"

    @property
    def member_ref(self) -> tuple[str, str]:
        """The agent run id and database id an agent files members under."""
        return self.agent_run_id, self.db.id

    @property
    def out(self) -> DatabaseLayout:
        return self.store.database(self.db.id, self.trial)

    @property
    def kind(self) -> DatabaseKind:
        return get_kind(self.db.kind)

    def settings(self, endpoints: tuple[str, ...], access: Access = PLAIN) -> LoadSettings:
        """How the load reaches the database at ``endpoints`` (as ``access`` says)."""
        w = self.db.workload
        return LoadSettings(
            access=access,
            endpoints=endpoints,
            client=self.db.client.model_dump(),
            key_size=w.key_size,
            value_size=w.value_size,
            consistency=w.read_consistency,
            timeout_s=w.request_timeout_s,
            same_key=w.one_key,
        )

    def load_options(self) -> LoadOptions:
        """The loads' options every phase starts from: this run's engine
        threads, progress stream and label."""
        return LoadOptions(workers=self.workers, progress=self.reporter.stream, label=self.db.id)

    def say(self, line: str) -> None:
        self.reporter.say(f"{self.db.id}: {line}")

    def failed(self, problem: object) -> DbtesterError:
        """``problem`` as this database's error, its id first."""
        return DbtesterError(f"{self.db.id}: {problem}")
