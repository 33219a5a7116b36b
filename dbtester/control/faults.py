"""Applying the test case's ``faults:`` to one database's cluster during its
load, on a thread of its own, through the members' agents.

Each fault waits for its moment (seconds after the load's start), resolves
its member (``leader`` / ``follower`` through the database kind at that
moment; ``restart`` / ``resume`` / ``heal`` reach the member the latest
kill / pause / isolate hit), asks that member's agent, and is recorded with the moment it took
effect on the controller's clock (the agent's time less its measured clock
offset). A fault that cannot be applied is recorded with its reason and
reported as the run's problem, which stops the load: a measurement of a
fault that did not happen would mislead. So is a fault still waiting when the
load ends (its ``at`` past the load's end): recorded as not applied, and the
run fails saying so, rather than pass with a member left out.

Client faults (``expire_session``) are the engine's to apply, inside the
load; ``stop`` is given what it did and records them in schedule order among
the others.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from dbtester.agent.client import AgentClient
from dbtester.config.faults import CLIENT, EVENTS, TAKES_OUT, UNDO, UNDONE, Fault
from dbtester.databases.base import PLAIN, Access, DatabaseKind, EventCall, EventFailed, Peer
from dbtester.errors import AgentError
from dbtester.results import FaultRecord, SessionExpiry
from dbtester.util.progress import Reporter

__all__ = ["EVENT_TIMEOUT_S", "LEADER_WAIT_S", "FaultRunner"]

#: how long a fault on ``leader`` waits for the cluster to name one, and how
#: long a kill, pause or isolation of the leader watches for the next one
LEADER_WAIT_S = 30.0
_POLL_S = 0.1
#: the longest a maintenance event may take (a defragmentation of a large
#: database takes tens of seconds)
EVENT_TIMEOUT_S = 300.0


class FaultRunner:
    """The schedule for one database run: ``start`` before the load,
    ``begin`` with the moment its first request was due (what ``at`` counts
    from: the load's connecting is not its time), ``stop`` when it ends
    (faults not yet due are then recorded as not applied; a load that never
    began records none)."""

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
        access: Access = PLAIN,
    ) -> None:
        self.faults = list(faults)
        self.access = access
        self.kind = kind
        self.peers = list(peers)
        self.clients = list(clients)
        self.offsets = list(offsets)
        self.run_id, self.db_id = member_ref
        self.reporter = reporter
        self.label = label
        self.records: list[FaultRecord] = []
        self.problem = ""
        #: (kill|pause|isolate|slow_disk, member, on the server beside it) in
        #: effect, latest last
        self._out: list[tuple[str, int, bool]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: each looks for the next leader after a fault took the leader out
        self._watchers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._began = threading.Event()
        self._load_start = 0.0
        #: how many of ``faults`` the thread has taken up (applied or failed)
        self._taken = 0

    def start(self) -> None:
        if not self.faults:
            return
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)
        self._thread.start()

    def begin(self, load_start: float) -> None:
        """``load_start``: time.time() of the load's first due request."""
        self._load_start = load_start
        self._began.set()

    def stop(self, expired: Sequence[SessionExpiry] = ()) -> tuple[FaultRecord, ...]:
        """Every fault's record, in schedule order; ``expired``: what the
        engine did of the client faults."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for watcher in self._watchers:
            watcher.join()
        ended = time.time()
        if self._began.is_set():
            late = [] if self.problem else self.faults[self._taken :]
            self._add(_not_applied(late, ended - self._load_start))
            self._add(_client_records(self.faults, expired, ended))
        with self._lock:
            # stable: a client fault goes after another due at its moment
            return tuple(sorted(self.records, key=lambda r: r.at_s))

    def _add(self, decided: Sequence[tuple[Fault, FaultRecord]]) -> None:
        """Records faults decided as the load ended: one not applied is the
        run's problem (the first one), one applied is said."""
        for fault, record in decided:
            if record.error:
                self.problem = self.problem or f"fault {fault.describe()} was {record.error}"
            else:
                self.reporter.say(f"{self.label}: {_said(record, False)}")
            with self._lock:
                self.records.append(record)

    @property
    def down(self) -> set[int]:
        """Members a kill, pause or isolation has taken out and nothing has
        brought back (an isolated one runs, but neither we nor its peers reach it)."""
        with self._lock:
            return {m for action, m, beside in self._out if action in TAKES_OUT and not beside}

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while not self._began.wait(_POLL_S):
            if self._stop.is_set():
                return
        load_start = self._load_start
        for fault in self.faults:
            if self._stop.wait(max(0.0, load_start + fault.at - time.time())):
                return
            self._taken += 1
            if fault.action in CLIENT:
                continue  # the engine applies it, within the load
            try:
                record, led = self._apply(fault)
            except Exception as exc:  # a bug: never let it pass for a fault that ran
                self.problem = self.problem or f"fault {fault.describe()} broke: {exc!r}"
                self.reporter.say(f"{self.label}: {self.problem}")
                return
            with self._lock:
                self.records.append(record)
                index = len(self.records) - 1
            if record.error:
                self.problem = self.problem or f"fault {fault.describe()}: {record.error}"
                self.reporter.say(f"{self.label}: {self.problem}")
                return
            self.reporter.say(f"{self.label}: {_said(record, led is not None)}")
            if led is not None:
                self._watch_for_leader(index, led)

    def _apply(self, fault: Fault) -> tuple[FaultRecord, float | None]:
        """The fault's record, and when it took the leader out (time.monotonic()
        as it was asked for) or None if it did not."""
        base = _scheduled(fault)
        if fault.action in EVENTS and fault.action != "upgrade":
            return self._event(fault, base), None
        # the rest are the member's agent's to carry out (an upgrade too)
        try:
            member, was_leader, beside = self._resolve(fault)
        except LookupError as exc:
            return base.model_copy(update={"error": str(exc)}), None
        asked = time.monotonic()
        try:
            reply = self.clients[member].fault(
                fault.action,
                self.run_id,
                self.db_id,
                member,
                keep_clients=fault.keep_clients,
                version=fault.to or "",
                fsync_ms=fault.fsync_ms or 0.0,
                companion=beside,
            )
        except AgentError as exc:
            return base.model_copy(update={"member": member, "error": str(exc)}), None
        update: dict[str, object] = {
            "target": "database" if beside else base.target,
            "member": member,
            "unix": reply.at_unix - self.offsets[member],
            "pid": reply.pid,
        }
        if fault.action == "upgrade":  # an event: it ended when the member ran again
            update |= {"end_unix": time.time(), "detail": f"member {member} to {fault.to}"}
        else:
            self._track(fault.action, member, beside)
        takes_out = fault.action in TAKES_OUT or fault.action == "upgrade"
        return base.model_copy(update=update), asked if was_leader and takes_out else None

    def _event(self, fault: Fault, base: FaultRecord) -> FaultRecord:
        """Run a maintenance event through the kind; it ends by itself. Its
        record holds when it began and ended on our clock, and what it did; a
        leader transfer also the seconds until the new leader was named."""
        try:
            members = self._event_members(fault)
            leader = self._leader(exclude=None)
        except LookupError as exc:
            return base.model_copy(update={"error": str(exc)})
        call = EventCall(
            tuple(self.peers),
            members,
            leader,
            fault.keep_revisions or 0,
            EVENT_TIMEOUT_S,
            self.access,
        )
        asked, began = time.monotonic(), time.time()
        try:
            detail = self.kind.run_event(fault.action, call)
        except EventFailed as exc:
            return base.model_copy(update={"error": str(exc)})
        ended = time.time()
        new_leader_s = None
        if fault.action == "transfer_leader":
            new_leader_s = self._named_leader(members[0], asked)
        return base.model_copy(
            update={
                "member": members[0] if len(members) == 1 else None,
                "unix": began,
                "end_unix": ended,
                "detail": detail,
                "new_leader_s": new_leader_s,
            }
        )

    def _event_members(self, fault: Fault) -> tuple[int, ...]:
        """The members an event acts on, in order (none: the whole cluster)."""
        if fault.target is None:
            return ()
        if fault.target == "all":
            return tuple(i for i in range(len(self.peers)) if i not in self.down)
        return (self._resolve(fault)[0],)

    def _named_leader(self, member: int, since: float) -> float | None:
        """Seconds from ``since`` (time.monotonic()) until ``member`` was named
        leader; None if it was not within LEADER_WAIT_S."""
        deadline = since + LEADER_WAIT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            if self._leader(exclude=None) == member:
                return round(time.monotonic() - since, 3)
            time.sleep(_POLL_S)
        return None

    def _watch_for_leader(self, index: int, since: float) -> None:
        """Look for the next leader on a thread of its own: the schedule goes
        on meanwhile (a restart due before the cluster names one must not wait)."""
        watcher = threading.Thread(
            target=self._next_leader, args=(index, since), name="next-leader", daemon=True
        )
        self._watchers.append(watcher)
        watcher.start()

    def _resolve(self, fault: Fault) -> tuple[int, bool, bool]:
        """(member index, whether it led the cluster when the fault hit,
        whether the fault is on the server the member runs beside it)."""
        target = fault.target  # an event's default member where it names none
        if target is None:  # restart / resume / heal: the latest kill / pause / isolate
            undone = UNDONE[fault.action]
            with self._lock:
                latest = self._out[-1] if self._out else None
            if latest is None or latest[0] != undone:
                raise LookupError(f"no {undone} in effect to undo")
            return latest[1], False, latest[2]
        if target == "database":  # the server member 0 runs (kine's PostgreSQL)
            return 0, False, True
        if isinstance(target, int):
            # Only the members that are up are asked: a paused or isolated one
            # would make the fault wait for its timeout.
            return target, target == self._leader(exclude=None), False
        leader = self._wait_for_leader(exclude=None)
        if target == "leader":
            return leader, True, False
        followers = [i for i in range(len(self.peers)) if i != leader and i not in self.down]
        if not followers:
            raise LookupError("no follower is up")
        return followers[0], False, False

    def _wait_for_leader(self, exclude: int | None) -> int:
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            found = self._leader(exclude)
            if found is not None:
                return found
            if time.monotonic() > deadline or self._stop.is_set():
                raise LookupError(f"no member was reported as leader within {LEADER_WAIT_S:.0f} s")
            time.sleep(_POLL_S)

    def _next_leader(self, index: int, since: float) -> None:
        """Record in fault ``index`` (which took the leader out at ``since``,
        time.monotonic()) the seconds until another member was named leader;
        nothing if none was within LEADER_WAIT_S or before the load ended."""
        old = self.records[index].member
        try:
            found = self._wait_for_leader(exclude=old)
        except LookupError:
            return
        seconds = round(time.monotonic() - since, 3)
        with self._lock:
            record = self.records[index].model_copy(update={"new_leader_s": seconds})
            self.records[index] = record
        self.reporter.say(
            f"{self.label}: member {found} leads, {seconds:.2f} s after the"
            f" {record.action} of member {old}"
        )

    def _leader(self, exclude: int | None) -> int | None:
        """The leader as the members that are up (and not ``exclude``) name it,
        as an index among all members; None while they name none. A killed,
        paused or isolated member is not asked: it answers nothing, or late (and
        an isolated one may still think it leads)."""
        up = [i for i in range(len(self.peers)) if i not in self.down and i != exclude]
        found = self.kind.leader([self.peers[i] for i in up], access=self.access)
        return None if found is None else up[found]

    def _track(self, action: str, member: int, beside: bool) -> None:
        with self._lock:
            if action in UNDO:
                self._out.append((action, member, beside))
            else:
                self._out.pop()


def _not_applied(faults: Sequence[Fault], ended_s: float) -> list[tuple[Fault, FaultRecord]]:
    """The agents' faults among ``faults`` (which the load ended before,
    ``ended_s`` after its start), each recorded as not applied."""
    error = (
        f"not applied: the load ended {ended_s:.1f} s after its start, before"
        " it was due; schedule it sooner or give the load more requests"
    )
    return [
        (fault, _scheduled(fault).model_copy(update={"error": error}))
        for fault in faults
        if fault.action not in CLIENT  # the engine's: _client_records
    ]


def _client_records(
    faults: Sequence[Fault], expired: Sequence[SessionExpiry], ended: float
) -> list[tuple[Fault, FaultRecord]]:
    """The client faults among ``faults``, in order, each with its record
    from what the engine did (``expired``; ``ended``: when the load did)."""
    applied = {e.number: e for e in expired}
    found = []
    for number, fault in enumerate(f for f in faults if f.action in CLIENT):
        base = _scheduled(fault)
        e = applied.get(number)
        if e is None:
            error = (
                "not applied: no locker held the lock from when it was due to the"
                " load's end; schedule it sooner or give the load more requests"
            )
            found.append((fault, base.model_copy(update={"error": error})))
            continue
        again = (
            f"a new holder took it {e.regained_unix - e.unix:.2f} s later"
            if e.regained_unix is not None
            else "no new holder took it before the load ended"
        )
        detail = f"locker {e.locker} crashed holding lock {e.lock}; {again}"
        update = {"unix": e.unix, "end_unix": e.regained_unix or ended, "detail": detail}
        found.append((fault, base.model_copy(update=update)))
    return found


def _scheduled(fault: Fault) -> FaultRecord:
    """The record of ``fault`` as scheduled, before anything happened."""
    return FaultRecord(
        at_s=fault.at,
        action=fault.action,
        target="" if fault.target is None else str(fault.target),
        keep_clients=fault.keep_clients,
        to=fault.to or "",
        fsync_ms=fault.fsync_ms,
        lock=fault.lock,
    )


def _said(record: FaultRecord, led: bool) -> str:
    if record.end_unix is not None and record.unix is not None:
        took = record.end_unix - record.unix
        return f"{record.action} at {record.at_s:g} s: {record.detail} (took {took:.2f} s)"
    who = "database" if record.target == "database" else f"member {record.member}"
    text = f"{record.action} {who} at {record.at_s:g} s"
    return f"{text} (it led)" if led else text
