"""The fault schedule's logic, with stand-ins for the agents and the kind (the
real ones are in tests/integration/test_agent_faults.py and
tests/e2e/test_scheduled_faults.py): whom each fault reaches, in what order,
on whose clock, and what a fault that cannot be applied does."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from dbtester.agent.client import AgentClient
from dbtester.config.faults import Fault
from dbtester.control import faults as faults_module
from dbtester.control.faults import FaultRunner
from dbtester.databases.base import PLAIN, Access, DatabaseKind, Peer
from dbtester.errors import AgentError
from dbtester.util.progress import Reporter
from tests.support.poll import poll_until


@dataclass
class Reply:
    at_unix: float
    pid: int
    state: str


@dataclass
class Agent:
    index: int
    calls: list[tuple[str, int]]
    pid: int = 100
    #: keep_clients, per call
    kept: list[bool] = field(default_factory=list)
    #: fsync_ms, per call
    fsync_ms: list[float] = field(default_factory=list)
    #: whether each call was on the server beside the member (member: database)
    beside: list[bool] = field(default_factory=list)

    def fault(
        self,
        action: str,
        run_id: str,
        database_id: str,
        member: int,
        *,
        keep_clients: bool = False,
        version: str = "",
        fsync_ms: float = 0.0,
        companion: bool = False,
    ) -> Reply:
        assert (run_id, database_id, member) == ("run", "db", self.index)
        self.calls.append((action, member))
        self.kept.append(keep_clients)
        self.fsync_ms.append(fsync_ms)
        self.beside.append(companion)
        self.pid += 1
        return Reply(at_unix=1000.0 + len(self.calls), pid=self.pid, state="x")


@dataclass
class Kind:
    """Member 1 leads until it is down; then member 2 does."""

    asked: list[list[str]] = field(default_factory=list)

    def leader(
        self, peers: Sequence[Peer], timeout: float = 2.0, access: Access = PLAIN
    ) -> int | None:
        names = [p.name for p in peers]
        self.asked.append(names)
        for name in ("m1", "m2"):
            if name in names:
                return names.index(name)
        return None


def _runner(faults: list[Fault], kind: Kind, calls: list[tuple[str, int]]) -> FaultRunner:
    peers = [Peer(f"m{i}", "127.0.0.1", {"client": 1}) for i in range(3)]
    agents = [Agent(i, calls) for i in range(3)]
    return FaultRunner(
        faults,
        cast(DatabaseKind, kind),
        peers,
        cast(list[AgentClient], agents),
        [0.5, 1.5, 2.5],  # each agent's clock is ahead of ours by this much
        ("run", "db"),
        Reporter(),
        "db",
    )


def _fault(at: float, action: str, member: Any = None, **more: Any) -> Fault:
    return Fault.model_validate({"at": at, "action": action, "member": member, **more})


def test_targets_order_and_clocks() -> None:
    calls: list[tuple[str, int]] = []
    kind = Kind()
    runner = _runner(
        [
            _fault(0.05, "kill", "leader"),
            _fault(0.10, "pause", "follower"),
            _fault(0.15, "resume"),
            _fault(0.20, "restart"),
        ],
        kind,
        calls,
    )
    runner.start()
    runner.begin(time.time())
    _wait_for_records(runner, 4, new_leader_of=0)
    records = runner.stop()
    # the leader (1) killed; the first follower that is up (0) paused and resumed;
    # then the killed leader restarted
    assert calls == [("kill", 1), ("pause", 0), ("resume", 0), ("restart", 1)]
    assert [r.member for r in records] == [1, 0, 0, 1]
    assert [r.target for r in records] == ["leader", "follower", "", ""]
    # agent time less that agent's offset
    assert [r.unix for r in records] == [1001 - 1.5, 1002 - 0.5, 1003 - 0.5, 1004 - 1.5]
    # the killed leader's successor was looked for among the others only
    assert records[0].new_leader_s is not None and records[1].new_leader_s is None
    assert ["m0", "m2"] in kind.asked
    assert not runner.problem and runner.down == set()


def test_a_fault_on_the_database_reaches_member_0s_server_and_takes_no_member_out() -> None:
    calls: list[tuple[str, int]] = []
    kind = Kind()
    runner = _runner(
        [
            _fault(0.05, "kill", "database"),
            _fault(0.10, "kill", "leader"),  # member 1, as before: 0 is not out
            _fault(0.15, "restart"),
            _fault(0.20, "restart"),
        ],
        kind,
        calls,
    )
    agents = cast(list[Agent], runner.clients)
    runner.start()
    runner.begin(time.time())
    _wait_for_records(runner, 4, new_leader_of=1)
    records = runner.stop()
    assert calls == [("kill", 0), ("kill", 1), ("restart", 1), ("restart", 0)]
    # the agent is told which: the server beside member 0, then member 1 itself
    assert agents[0].beside == [True, True] and agents[1].beside == [False, False]
    assert [r.target for r in records] == ["database", "leader", "", "database"]
    assert records[0].new_leader_s is None  # the server's death is no leader's
    assert not runner.problem and runner.down == set()


def test_a_fault_that_cannot_be_applied_stops_the_schedule(monkeypatch) -> None:
    """No member is ever named leader: the fault is recorded with the reason,
    the run gets a problem (which stops its load), later faults do not run."""
    monkeypatch.setattr(faults_module, "LEADER_WAIT_S", 0.2)

    class Leaderless(Kind):
        def leader(
            self, peers: Sequence[Peer], timeout: float = 2.0, access: Access = PLAIN
        ) -> int | None:
            return None

    calls: list[tuple[str, int]] = []
    runner = _runner([_fault(0.01, "kill", "leader"), _fault(0.02, "restart")], Leaderless(), calls)
    runner.start()
    runner.begin(time.time())
    poll_until(lambda: runner.problem, 10, message="no problem reported")
    (record,) = runner.stop()
    assert calls == []
    assert "no member was reported as leader within 0 s" in record.error
    assert runner.problem.startswith("fault kill leader at 0.01 s: no member")


def test_faults_not_yet_due_are_recorded_as_not_applied_when_the_load_ends() -> None:
    calls: list[tuple[str, int]] = []
    runner = _runner([_fault(0.01, "kill", 2), _fault(30, "restart")], Kind(), calls)
    runner.start()
    runner.begin(time.time())
    poll_until(lambda: calls == [("kill", 2)], 10, message=lambda: f"calls: {calls}")
    stopping = time.monotonic()
    records = runner.stop()
    # stop() does not wait out the restart due at 30 s: 5 s is margin for a
    # busy machine, far below the 30 s it would take if it waited
    assert time.monotonic() - stopping < 5
    assert calls == [("kill", 2)] and len(records) == 2
    assert runner.down == {2}
    # the restart is on record as not applied, and the run's problem says so
    # (a member left out must not pass for a fault that was undone)
    kill, restart = records
    assert not kill.error and restart.action == "restart" and restart.unix is None
    assert restart.error.startswith("not applied: the load ended")
    assert runner.problem.startswith("fault restart at 30 s was not applied"), runner.problem


def test_a_load_that_never_began_records_no_fault() -> None:
    calls: list[tuple[str, int]] = []
    runner = _runner([_fault(1, "kill", 2)], Kind(), calls)
    runner.start()
    assert runner.stop() == () and not runner.problem and calls == []


def test_faults_count_from_the_loads_begin_not_from_start() -> None:
    """The runner starts before the load connects; ``at`` counts from when
    the load's first request was due (``begin``), and a load that never
    began gets no fault at all."""
    calls: list[tuple[str, int]] = []
    runner = _runner([_fault(0.01, "kill", 2)], Kind(), calls)
    runner.start()
    # 0.3 s without a begin: a fault due at 0.01 s would have run within it
    # if the clock ran from start (the thread polls every 0.1 s)
    time.sleep(0.3)
    assert calls == []
    runner.begin(time.time())
    poll_until(lambda: calls == [("kill", 2)], 10, message=lambda: f"calls: {calls}")
    runner.stop()

    never: list[tuple[str, int]] = []
    unbegun = _runner([_fault(0.01, "kill", 2)], Kind(), never)
    unbegun.start()
    assert unbegun.stop() == () and never == []


def test_an_isolated_leader_counts_as_down_until_healed() -> None:
    """Isolating the leader records how long until another was named; while
    isolated it is never asked for the leader (it may still think it leads,
    and its answer could not reach us anyway), so ``follower`` is named among
    the others; heal reaches it again."""
    calls: list[tuple[str, int]] = []
    kind = Kind()
    runner = _runner(
        [
            _fault(0.05, "isolate", "leader"),
            _fault(0.10, "kill", "follower"),
            _fault(0.15, "restart"),
            _fault(0.20, "heal"),
        ],
        kind,
        calls,
    )
    runner.start()
    runner.begin(time.time())
    _wait_for_records(runner, 4, new_leader_of=0)
    records = runner.stop()
    # the leader (1) isolated; among 0 and 2, 2 now leads: 0 is the follower
    assert calls == [("isolate", 1), ("kill", 0), ("restart", 0), ("heal", 1)]
    assert [r.target for r in records] == ["leader", "follower", "", ""]
    assert records[0].new_leader_s is not None and records[0].unix == 1001 - 1.5
    assert all(r.new_leader_s is None for r in records[1:])
    assert kind.asked[0] == ["m0", "m1", "m2"]
    assert all("m1" not in asked for asked in kind.asked[1:]), kind.asked
    assert not runner.problem and runner.down == set()


def test_an_isolation_the_agent_refuses_fails_the_run() -> None:
    """No nft on the member's host (or not allowed to use it): the agent's
    reason is the fault's error and the run's problem; the heal never runs."""

    class NoFirewall(Agent):
        def fault(self, action: str, run_id: str, database_id: str, member: int, **_: Any) -> Reply:
            if action == "isolate":
                raise AgentError(
                    f"10.0.0.{member}:3500",
                    "FAILED_PRECONDITION: isolate needs the nft command",
                    "FAILED_PRECONDITION",
                )
            return super().fault(action, run_id, database_id, member)

    calls: list[tuple[str, int]] = []
    runner = _runner([_fault(0.01, "isolate", 0), _fault(0.05, "heal")], Kind(), calls)
    runner.clients = cast(list[AgentClient], [NoFirewall(i, calls) for i in range(3)])
    runner.start()
    runner.begin(time.time())
    poll_until(lambda: runner.problem, 10, message="no problem reported")
    (record,) = runner.stop()
    assert calls == [] and record.member == 0
    assert "FAILED_PRECONDITION: isolate needs the nft command" in record.error
    assert runner.problem.startswith("fault isolate member 0 at 0.01 s: ")
    assert runner.down == set()


def test_a_restart_due_before_a_new_leader_is_named_is_not_held_up() -> None:
    """The cluster names no other leader until the restart due 0.05 s after
    the kill has run: were the restart held up by the search for the next
    leader, neither would ever happen. The kill still gets its new_leader_s.
    No timing is relied on: the order is causal."""
    restarted = threading.Event()

    class SlowElection(Kind):
        def leader(
            self, peers: Sequence[Peer], timeout: float = 2.0, access: Access = PLAIN
        ) -> int | None:
            names = [p.name for p in peers]
            if "m1" in names:
                return names.index("m1")
            if not restarted.is_set():
                return None  # electing
            return names.index("m2") if "m2" in names else None

    calls: list[tuple[str, int]] = []
    moments: list[float] = []

    class Timed(Agent):
        def fault(self, action: str, run_id: str, database_id: str, member: int, **_: Any) -> Reply:
            moments.append(time.monotonic())
            reply = super().fault(action, run_id, database_id, member)
            if action == "restart":
                restarted.set()
            return reply

    runner = _runner(
        [_fault(0.05, "kill", "leader"), _fault(0.10, "restart")], SlowElection(), calls
    )
    runner.clients = cast(list[AgentClient], [Timed(i, calls) for i in range(3)])
    runner.start()
    runner.begin(time.time())
    _wait_for_records(runner, 2, new_leader_of=0)
    kill, restart = runner.stop()
    assert calls == [("kill", 1), ("restart", 1)]
    # named after the restart, so at least that long after the kill (the
    # record rounds to 1 ms)
    assert kill.new_leader_s is not None
    assert kill.new_leader_s >= moments[1] - moments[0] - 0.001, (kill, moments)
    assert restart.new_leader_s is None


def _wait_for_records(runner: FaultRunner, count: int, new_leader_of: int) -> None:
    """Until ``count`` faults ran and fault ``new_leader_of`` has its
    new_leader_s (the search for the next leader runs on a thread of its own)."""

    def done() -> bool:
        records = list(runner.records)
        return len(records) == count and records[new_leader_of].new_leader_s is not None

    poll_until(done, 10, message=lambda: f"records: {runner.records}")


def test_an_isolation_that_keeps_its_clients_says_so_to_the_agent() -> None:
    calls: list[tuple[str, int]] = []
    runner = _runner(
        [_fault(0.01, "isolate", 0, keep_clients=True), _fault(0.05, "heal")], Kind(), calls
    )
    agents = cast(list[Agent], runner.clients)
    runner.start()
    runner.begin(time.time())
    poll_until(lambda: len(calls) == 2, 10, message=lambda: f"calls: {calls}")
    isolated, healed = runner.stop()
    assert calls == [("isolate", 0), ("heal", 0)] and agents[0].kept == [True, False]
    assert isolated.keep_clients and not healed.keep_clients


def test_a_slowed_leader_is_still_up_and_still_leads() -> None:
    """A slow disk slows its member and takes nothing out: the leader slowed
    is asked who leads, and a follower after it is another member."""
    calls: list[tuple[str, int]] = []
    runner = _runner(
        [
            _fault(0.01, "slow_disk", "leader", fsync_ms=20),
            _fault(0.03, "pause", "follower"),
            _fault(0.05, "resume"),
            _fault(0.07, "restore_disk"),
        ],
        Kind(),
        calls,
    )
    agents = cast(list[Agent], runner.clients)
    runner.start()
    runner.begin(time.time())
    poll_until(lambda: len(calls) == 4, 10, message=lambda: f"calls: {calls}")
    slowed, _, _, restored = runner.stop()
    assert calls == [("slow_disk", 1), ("pause", 0), ("resume", 0), ("restore_disk", 1)]
    assert agents[1].fsync_ms == [20.0, 0.0] and slowed.fsync_ms == 20.0
    assert slowed.new_leader_s is None and restored.fsync_ms is None
    assert not runner.down


def test_a_fault_that_breaks_fails_the_run_rather_than_passing_for_done() -> None:
    """A bug in a kind's event (here a NameError) is the run's problem; the
    schedule stops, and no record claims the fault ran."""

    @dataclass
    class Broken(Kind):
        def run_event(self, event: str, call: object) -> str:
            raise NameError("status")

    runner = _runner([_fault(0.01, "compact"), _fault(0.02, "kill", "leader")], Broken(), [])
    runner.start()
    runner.begin(time.time())
    poll_until(lambda: runner.problem, 10, message="no problem reported")
    assert not runner.stop()
    assert runner.problem.startswith("fault compact at 0.01 s broke: NameError"), runner.problem
