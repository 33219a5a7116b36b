"""Applying the test case's ``faults:`` to one database's cluster during its
load, on a thread of its own, through the members' agents.

Each fault waits for its moment (seconds after the load's start), resolves
its member (``leader`` / ``follower`` through the database kind at that
moment; ``restart`` / ``resume`` / ``heal`` reach the member the latest
kill / pause / isolate hit), asks that member's agent, and is recorded with the moment it took
effect on the controller's clock (the agent's time less its measured clock
offset). A fault that cannot be applied is recorded with its reason and
reported as the run's problem, which stops the load: a measurement of a
fault that did not happen would mislead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from dbtester.agent.client import AgentClient
from dbtester.config.faults import UNDO, UNDONE, Fault
from dbtester.databases.base import DatabaseKind, Peer
from dbtester.errors import AgentError
from dbtester.results import FaultRecord
from dbtester.util.progress import Reporter

__all__ = ["LEADER_WAIT_S", "FaultRunner"]

#: how long a fault on ``leader`` waits for the cluster to name one, and how
#: long a kill, pause or isolation of the leader watches for the next one
LEADER_WAIT_S = 30.0
_POLL_S = 0.1


class FaultRunner:
    """The schedule for one database run; ``start`` when the load starts,
    ``stop`` when it ends (faults not yet due are then dropped)."""

    def __init__(
        self,
        faults: Sequence[Fault],
        kind: DatabaseKind,
        peers: Sequence[Peer],
        clients: Sequence[AgentClient],
        offsets: Sequence[float],
        member_ref: tuple[str, str],
        reporter: Reporter,
        label: str,
    ) -> None:
        self.faults = list(faults)
        self.kind = kind
        self.peers = list(peers)
        self.clients = list(clients)
        self.offsets = list(offsets)
        self.run_id, self.db_id = member_ref
        self.reporter = reporter
        self.label = label
        self.records: list[FaultRecord] = []
        self.problem = ""
        self._out: list[tuple[str, int]] = []  # (kill|pause|isolate, member) in effect
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, load_start: float) -> None:
        """``load_start``: time.time() when the load began."""
        if not self.faults:
            return
        self._thread = threading.Thread(
            target=self._run, args=(load_start,), name="faults", daemon=True
        )
        self._thread.start()

    def stop(self) -> tuple[FaultRecord, ...]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            return tuple(self.records)

    @property
    def down(self) -> set[int]:
        """Members a kill, pause or isolation has taken out and nothing has
        brought back (an isolated one runs, but neither we nor its peers reach it)."""
        with self._lock:
            return {member for _, member in self._out}

    # ------------------------------------------------------------------ the thread

    def _run(self, load_start: float) -> None:
        for fault in self.faults:
            if self._stop.wait(max(0.0, load_start + fault.at - time.time())):
                return
            record = self._apply(fault, load_start)
            with self._lock:
                self.records.append(record)
            if record.error:
                self.problem = self.problem or f"fault {fault.describe()}: {record.error}"
                self.reporter.say(f"{self.label}: {self.problem}")
                return
            self.reporter.say(f"{self.label}: {_said(record)}")

    def _apply(self, fault: Fault, load_start: float) -> FaultRecord:
        target = "" if fault.member is None else str(fault.member)
        base = FaultRecord(at_s=fault.at, action=fault.action, target=target)
        try:
            member, was_leader = self._resolve(fault)
        except LookupError as exc:
            return base.model_copy(update={"error": str(exc)})
        try:
            reply = self.clients[member].fault(fault.action, self.run_id, self.db_id, member)
        except AgentError as exc:
            return base.model_copy(update={"member": member, "error": str(exc)})
        self._track(fault.action, member)
        record = base.model_copy(
            update={
                "member": member,
                "unix": reply.at_unix - self.offsets[member],
                "pid": reply.pid,
            }
        )
        if was_leader and fault.action in UNDO:
            record = record.model_copy(update={"new_leader_s": self._next_leader(member)})
        return record

    def _resolve(self, fault: Fault) -> tuple[int, bool]:
        """(member index, whether it led the cluster when the fault hit)."""
        if fault.member is None:  # restart / resume / heal: the latest kill / pause / isolate
            undone = UNDONE[fault.action]
            with self._lock:
                latest = self._out[-1] if self._out else None
            if latest is None or latest[0] != undone:
                raise LookupError(f"no {undone} in effect to undo")
            return latest[1], False
        if isinstance(fault.member, int):
            # Only the members that are up are asked: a paused or isolated one
            # would make the fault wait for its timeout.
            return fault.member, fault.member == self._leader(exclude=None)
        leader = self._wait_for_leader(exclude=None)
        if fault.member == "leader":
            return leader, True
        followers = [i for i in range(len(self.peers)) if i != leader and i not in self.down]
        if not followers:
            raise LookupError("no follower is up")
        return followers[0], False

    def _wait_for_leader(self, exclude: int | None) -> int:
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            found = self._leader(exclude)
            if found is not None:
                return found
            if time.monotonic() > deadline or self._stop.is_set():
                raise LookupError(f"no member was reported as leader within {LEADER_WAIT_S:.0f} s")
            time.sleep(_POLL_S)

    def _next_leader(self, old: int) -> float | None:
        """Seconds until a member other than ``old`` is reported as leader."""
        began = time.monotonic()
        try:
            self._wait_for_leader(exclude=old)
        except LookupError:
            return None
        return round(time.monotonic() - began, 3)

    def _leader(self, exclude: int | None) -> int | None:
        """The leader as the members that are up (and not ``exclude``) name it,
        as an index among all members; None while they name none. A killed,
        paused or isolated member is not asked: it answers nothing, or late (and
        an isolated one may still think it leads)."""
        up = [i for i in range(len(self.peers)) if i not in self.down and i != exclude]
        found = self.kind.leader([self.peers[i] for i in up])
        return None if found is None else up[found]

    def _track(self, action: str, member: int) -> None:
        with self._lock:
            if action in UNDO:
                self._out.append((action, member))
            else:
                self._out.pop()


def _said(record: FaultRecord) -> str:
    text = f"{record.action} member {record.member} at {record.at_s:g} s"
    if record.new_leader_s is not None:
        text += f" (it led; a new leader {record.new_leader_s:.2f} s later)"
    return text
