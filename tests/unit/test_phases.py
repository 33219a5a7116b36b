"""A database's run phase by phase, through the phases' public functions:
what each returns when it cannot finish, and the record built from however
far the run got."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from dbtester.agent.client import ClockOffset
from dbtester.config.load import load_test_case_text
from dbtester.config.model import Host
from dbtester.control import cluster
from dbtester.control.job import DatabaseJob
from dbtester.control.record import Collected, record
from dbtester.errors import AgentError
from dbtester.results import ResultsDir
from dbtester.util.progress import Reporter

CASE = """
title: t
workload: {type: write, requests: 100}
databases:
  - id: db
    kind: etcd
    version: 3.5.17
    hosts: [{address: 127.0.0.1, agent_port: 3501}, {address: 127.0.0.1, agent_port: 3502}]
"""


def _job(tmp_path: Path) -> DatabaseJob:
    db = load_test_case_text(CASE).case.databases[0]
    return DatabaseJob(db, "run", ResultsDir(tmp_path / "out"), tmp_path / "scratch", Reporter())


class _Agent:
    """An agent client that answers (or not) without a network."""

    def __init__(self, address: str, answers: bool) -> None:
        self.address = address
        self.answers = answers
        self.closed = False

    def wait_ready(self, timeout: float) -> None:
        if not self.answers:
            raise AgentError(self.address, "not serving after 30 s")

    def clock_offset(self) -> ClockOffset:
        return ClockOffset(offset_s=0.002, round_trip_s=0.001)

    def close(self) -> None:
        self.closed = True


def test_an_agent_that_does_not_answer_keeps_the_members_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second agent is silent: connect returns it as the failure, with
    the first one's member (its clock measured) for the record."""
    made: list[_Agent] = []

    def client_of(host: Host) -> _Agent:
        made.append(_Agent(f"{host.address}:{host.agent_port}", answers=not made))
        return made[-1]

    monkeypatch.setattr(cluster, "remote_client", client_of)
    with ExitStack() as stack:
        agents = cluster.connect(_job(tmp_path), stack)
    assert isinstance(agents.failure, AgentError)
    assert "127.0.0.1:3502" in str(agents.failure)
    assert [(m.index, m.agent, m.clock_offset_s) for m in agents.members] == [
        (0, "127.0.0.1:3501", 0.002)
    ]
    assert all(a.closed for a in made)  # closed with the stack, whatever happened


def test_a_run_stopped_before_any_phase_still_has_a_record(tmp_path: Path) -> None:
    """Ctrl-C before the agents answered: the record holds the error and the
    test case's notes, and no load, member or verification."""
    job = _job(tmp_path)
    built = record(job, Collected(started_unix=1.0, error="interrupted (Ctrl-C)"))
    assert (built.error, built.started_unix, built.trial) == ("interrupted (Ctrl-C)", 1.0, None)
    assert built.load is None and built.warmup is None and built.load_phase is None
    assert built.members == () and built.endpoints == () and built.verification is None
    assert not built.passed
