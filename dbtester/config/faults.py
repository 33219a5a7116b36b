"""Scheduled faults: the test case's ``faults:``, applied to every database's
cluster during its load, at the same moments.

A fault is ``{at: 10s, action: kill, member: leader}``: ``at`` counts from the
load's start (``10s``, ``1.5s``, ``500ms``, ``2m`` or a number of seconds);
``member`` is an index, ``leader`` or ``follower`` (resolved by the database
kind at the moment of the fault), or for a kill or a pause ``database``: the
server member 0 runs beside it (kine's PostgreSQL, :func:`check_companions`).
``restart``, ``resume`` and ``heal`` undo the latest ``kill`` / ``pause`` /
``isolate`` that is still in effect and name no member of their own (they
reach the member it hit, which may no longer be the leader). ``isolate``
cuts a member's host off the network, so it needs members on hosts of their
own (:func:`check_isolation`); with
``keep_clients: true`` it cuts the member off its peers only, and its
clients still reach it (what it answers alone, a serializable read, may
then be stale). ``slow_disk`` makes every fsync in a member's data directory
take ``fsync_ms`` longer, through a layer the agent mounts before the member
starts (agent/disk_layer.py); ``restore_disk`` undoes it.

Maintenance events (:data:`EVENTS`) are faults that end by themselves: the
database's own compaction, defragmentation, snapshot or leader transfer, run
through its client API while the load goes on; each kind says which it can
run (``DatabaseKind.events``).

Client faults (:data:`CLIENT`) are the load's own: ``expire_session`` (with
``lock: N``) makes the locker holding lock N at that moment (or the next one
to take it) crash, as a client process would: it stops keeping its session
alive, drops it without ending it and never releases, so the lock passes on
only when the database expires the session. The engine applies it; the
workload says whether it can (``Workload.fault_problem``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dbtester.util.durations import parse_duration
from dbtester.util.net import is_loopback

#: a version as a test case writes it (the databases' version key shares it)
VERSION_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z._+~-]{0,63}$"

__all__ = [
    "CLIENT",
    "EVENTS",
    "MAX_AT_S",
    "MAX_FSYNC_MS",
    "TAKES_OUT",
    "UNDO",
    "UNDONE",
    "VERSION_PATTERN",
    "Fault",
    "check_client_faults",
    "check_companions",
    "check_events",
    "check_isolation",
    "check_schedule",
    "check_upgrades",
    "check_within_load",
    "parse_duration",
]

#: the action that undoes each one that takes a member out, or slows it
UNDO = {"kill": "restart", "pause": "resume", "isolate": "heal", "slow_disk": "restore_disk"}
#: the ones that take a member out: it answers nothing until undone
TAKES_OUT = frozenset({"kill", "pause", "isolate"})
#: what ``member: database`` may do to the server a member runs beside it
ON_COMPANION = frozenset({"kill", "pause"})
#: the longest fsync delay a slow_disk may set, in ms
MAX_FSYNC_MS = 60_000.0
#: maintenance events: each ends by itself, and what ``member`` may say for it
#: (None: it takes none; the default, then the other values allowed)
EVENTS: dict[str, tuple[object, ...]] = {
    "compact": (None,),
    "defrag": ("leader", "leader", "follower", "all", "index"),
    "snapshot": ("leader", "leader", "follower", "index"),
    "transfer_leader": ("follower", "follower", "index"),
    "upgrade": ("index", "index", "leader", "follower"),
}
#: faults the load's engine applies to its own clients (a locker crashing)
CLIENT = frozenset({"expire_session"})
#: keys that only one action takes
_OWNED = {
    "lock": "expire_session",
    "to": "upgrade",
    "keep_revisions": "compact",
    "keep_clients": "isolate",
    "fsync_ms": "slow_disk",
}
#: the other way round: what each undoing action undoes
UNDONE = {undo: action for action, undo in UNDO.items()}
#: a day: past any load dbtester runs
MAX_AT_S = 86_400.0


class Fault(BaseModel):
    """One scheduled fault."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    at: float = Field(
        gt=0,
        le=MAX_AT_S,
        description="When, from the load's start: 10s, 1.5s, 500ms, 2m or a number of seconds",
    )
    action: Literal[
        "kill",
        "restart",
        "pause",
        "resume",
        "isolate",
        "heal",
        "compact",
        "defrag",
        "snapshot",
        "transfer_leader",
        "upgrade",
        "slow_disk",
        "restore_disk",
        "expire_session",
    ] = Field(
        description="kill, pause and isolate take a member out, slow_disk slows its fsync;"
        " restart, resume, heal and restore_disk undo the latest one still in effect;"
        " compact, defrag, snapshot, transfer_leader and upgrade are maintenance events"
        " that end by themselves; expire_session crashes the locker holding a lock"
    )
    member: int | Literal["leader", "follower", "all", "database"] | None = Field(
        None,
        description="kill, pause, isolate: an index (from 0), leader or follower; kill and"
        " pause: also database, the server member 0 runs beside it (kine's PostgreSQL);"
        " the undoing actions take none; defrag: also all (one member after the other);"
        " snapshot: the member asked (default leader); transfer_leader: the new leader"
        " (default a follower); upgrade: the member to upgrade; compact takes none",
    )
    keep_revisions: int | None = Field(
        None,
        ge=0,
        description="compact: keep this many revisions before the current one (default 0)",
    )
    to: Annotated[str, Field(pattern=VERSION_PATTERN)] | None = Field(
        None,
        description='upgrade: the version the member runs next, on its data (quote it: "3.6.8")',
    )

    fsync_ms: float | None = Field(
        None,
        gt=0,
        le=MAX_FSYNC_MS,
        description="slow_disk: every fsync in the member's data directory takes this many"
        " ms longer, until restore_disk",
    )

    lock: int | None = Field(
        None,
        ge=0,
        description="expire_session: the lock (from 0) whose holder crashes; its session is"
        " left to expire",
    )

    keep_clients: bool = Field(
        False,
        description="isolate: the member's clients still reach it; only its peers are cut off",
    )

    _at = field_validator("at", mode="before")(parse_duration)

    @field_validator("member")
    @classmethod
    def _index(cls, member: int | str | None) -> int | str | None:
        if isinstance(member, int) and member < 0:
            raise ValueError("member: an index counts from 0")
        return member

    @model_validator(mode="after")
    def _target(self) -> Fault:
        for key, owner in _OWNED.items():
            if getattr(self, key) not in (None, False) and self.action != owner:
                why = " (which clients may still reach)" if key == "keep_clients" else ""
                raise ValueError(f"{key} is for {owner}{why}, not {self.action}")
        if self.action == "upgrade" and self.to is None:
            raise ValueError("upgrade needs to: the version to run next")
        if self.action == "slow_disk" and self.fsync_ms is None:
            raise ValueError("slow_disk needs fsync_ms: how much longer each fsync takes")
        if self.action in EVENTS:
            return self._event_target()
        if self.action in CLIENT:
            if self.member is not None:
                raise ValueError(f"{self.action} takes no member: it acts on a locker (lock: N)")
            if self.lock is None:
                raise ValueError(f"{self.action} needs lock: the lock whose holder crashes")
            return self
        if self.member == "all":
            raise ValueError(f"member: all is for defrag, not {self.action}")
        if self.member == "database" and self.action not in ON_COMPANION:
            raise ValueError(
                f"member: database (the server a member runs beside it) is for kill and"
                f" pause, not {self.action}"
            )
        undoes = self.action in UNDONE
        if undoes and self.member is not None:
            raise ValueError(
                f"{self.action} takes no member: it undoes the latest"
                f" {UNDONE[self.action]} still in effect"
            )
        if not undoes and self.member is None:
            raise ValueError(f"{self.action} needs a member: an index, leader or follower")
        return self

    def _event_target(self) -> Fault:
        default, *allowed = EVENTS[self.action]
        if self.keep_clients:
            raise ValueError(f"keep_clients is for isolate, not {self.action}")
        if self.keep_revisions is not None and self.action != "compact":
            raise ValueError(f"keep_revisions is for compact, not {self.action}")
        if self.member is None:
            if default == "index":
                raise ValueError(f"{self.action} needs a member: an index, leader or follower")
            return self
        given = "index" if isinstance(self.member, int) else self.member
        if default is None:
            raise ValueError(f"{self.action} takes no member: it acts on the whole cluster")
        if given not in allowed or given == "database":
            words = " or ".join("an index" if a == "index" else str(a) for a in allowed)
            raise ValueError(f"{self.action}: member is {words}, not {self.member}")
        return self

    @property
    def target(self) -> int | str | None:
        """The member as it applies: an event's default where none is given."""
        if self.member is None and self.action in EVENTS:
            default = EVENTS[self.action][0]
            return default if isinstance(default, str) else None
        return self.member

    def describe(self) -> str:
        """e.g. ``kill leader at 10 s``."""
        member = self.target
        who = f" member {member}" if isinstance(member, int) else f" {member}"
        if self.action == "transfer_leader":
            who = f" to{who}"
        peers = " from its peers" if self.keep_clients else ""
        keep = f" keeping {self.keep_revisions}" if self.keep_revisions else ""
        to = f" to {self.to}" if self.to else ""
        to += f" by {self.fsync_ms:g} ms" if self.fsync_ms else ""
        to += f" of lock {self.lock}'s holder" if self.lock is not None else ""
        text = f"{self.action}{who if member is not None else ''}{peers}{keep}{to}"
        return f"{text} at {self.at:g} s"


def _where(number: int, fault: Fault) -> str:
    return f"faults[{number}] ({fault.describe()})"


def check_schedule(faults: Sequence[Fault], members: int) -> None:
    """The schedule as a whole: in time order, indices within ``members``, every
    restart/resume/heal right after (in undo order) the kill/pause/isolate it
    undoes: each undoes the latest one still in effect. ValueError otherwise."""
    out: list[str] = []  # actions in effect, latest last ("kill", "pause", "isolate")
    previous = 0.0
    for number, fault in enumerate(faults):
        where = _where(number, fault)
        if fault.at < previous:
            raise ValueError(f"{where}: faults must be in time order (the one before is later)")
        previous = fault.at
        if fault.target == "follower" and members < 2:
            raise ValueError(f"{where}: a database here has {members} member, and so no follower")
        if isinstance(fault.member, int) and fault.member >= members:
            raise ValueError(
                f"{where}: member {fault.member} does not exist: a database here has"
                f" {members} member(s), indices 0..{members - 1}"
            )
        if fault.action in EVENTS or fault.action in CLIENT:
            continue  # ends by itself: nothing to undo
        if fault.action in UNDO:
            out.append(fault.action)
            continue
        undone = UNDONE[fault.action]
        if not out or out[-1] != undone:
            raise ValueError(f"{where}: there is no {undone} in effect for it to undo")
        out.pop()


def check_within_load(faults: Sequence[Fault], loads: Sequence[tuple[str, int, float]]) -> None:
    """Each fault is due while an open-loop load still runs: ``loads`` holds
    each database's id, measured requests and rate (0: closed loop, whose
    length is not known beforehand). ValueError otherwise: a fault due after
    the load would never be applied."""
    for db_id, requests, rate in loads:
        if not rate:
            continue
        lasts = requests / rate
        for number, fault in enumerate(faults):
            if fault.at >= lasts:
                raise ValueError(
                    f"{_where(number, fault)}: {db_id}'s load lasts {lasts:g} s ({requests:,}"
                    f" requests at {rate:g}/s), so it would never be applied; schedule it"
                    " sooner or give the load more requests"
                )


def check_companions(faults: Sequence[Fault], databases: Sequence[tuple[str, str | None]]) -> None:
    """Every database has the server a ``member: database`` fault acts on:
    ``databases`` are (id, the name of the server its member 0 runs beside
    it, or None). ValueError otherwise, naming the fault and the database."""
    for number, fault in enumerate(faults):
        if fault.member != "database":
            continue
        for db_id, companion in databases:
            if companion is None:
                raise ValueError(
                    f"{_where(number, fault)}: database {db_id} runs no server beside its"
                    " members (kine with backend: postgres runs PostgreSQL)"
                )


def check_events(
    faults: Sequence[Fault],
    kinds: Sequence[tuple[str, str, frozenset[str], Mapping[str, str]]],
) -> None:
    """Every maintenance event can run on every database: ``kinds`` are
    (database id, kind, the events the kind can run, what stands for the
    others). ValueError otherwise, naming the fault, the database, why, and
    the kinds that can."""
    for number, fault in enumerate(faults):
        if fault.action not in EVENTS:
            continue
        for db_id, kind, able, notes in kinds:
            if fault.action in able:
                continue
            why = f": {notes[fault.action]}" if fault.action in notes else ""
            can = sorted({k for _, k, a, _ in kinds if fault.action in a})
            hint = f" ({', '.join(can)} can)" if can else ""
            raise ValueError(
                f"{_where(number, fault)}: database {db_id} is {kind}, which has no"
                f" {fault.action}{why}{hint}"
            )


def check_client_faults(
    faults: Sequence[Fault], loads: Sequence[tuple[str, Callable[[str, int | None], str | None]]]
) -> None:
    """Every database's load can carry out every client fault: ``loads``
    are (database id, its workload's ``fault_problem``). ValueError
    otherwise, naming the fault, the database and why."""
    for number, fault in enumerate(faults):
        if fault.action not in CLIENT:
            continue
        for db_id, problem in loads:
            if why := problem(fault.action, fault.lock):
                raise ValueError(f"{_where(number, fault)}: database {db_id}'s load {why}")


def check_upgrades(
    faults: Sequence[Fault],
    databases: Sequence[tuple[str, str, str, Callable[[str, str], str | None]]],
) -> None:
    """Each ``upgrade`` is a step every database may take: ``databases`` are
    (id, kind, version, the kind's rule: why a step is refused, or None).
    The databases must be of one kind (``to:`` names one kind's version), and
    a member upgraded twice goes from the version it ran last."""
    upgrades = [(n, f) for n, f in enumerate(faults) if f.action == "upgrade"]
    if not upgrades:
        return
    kinds = sorted({kind for _, kind, _, _ in databases})
    if len(kinds) > 1:
        number, fault = upgrades[0]
        raise ValueError(
            f"{_where(number, fault)}: to: names one kind's version, and the databases"
            f" are {', '.join(kinds)}: give upgrades to a test case of one kind"
        )
    for db_id, _, version, refusal in databases:
        running: dict[int | str | None, str] = {}
        for number, fault in upgrades:
            before = running.get(fault.target, version)
            assert fault.to is not None  # the model requires it for upgrade
            why = refusal(before, fault.to)
            if why:
                raise ValueError(f"{_where(number, fault)}: database {db_id} runs {before}: {why}")
            running[fault.target] = fault.to


def check_isolation(faults: Sequence[Fault], database: str, addresses: Sequence[str]) -> None:
    """``isolate`` cuts the isolated member's whole host off the network (a
    firewall rule on it), so that host must run no other member of the
    database: ``addresses`` are its members' host addresses, in member order,
    empty when this machine runs them all on loopback. A ``leader`` or
    ``follower`` is named only at run time: every member needs a host of its
    own. ValueError otherwise, naming the fault and the database."""
    for number, fault in enumerate(faults):
        if fault.action != "isolate":
            continue
        where = f"{_where(number, fault)}: database {database}"
        if not addresses or any(is_loopback(a) for a in addresses):
            # The rule keeps loopback traffic (the agent's own), so on loopback
            # it would cut nothing off.
            given = "no hosts:" if not addresses else "a loopback host address"
            raise ValueError(
                f"{where} runs its members on this machine's loopback ({given}); isolate"
                " cuts a member's host off the network, so it needs members on hosts of"
                " their own (give the database hosts: with their network addresses)"
            )
        if isinstance(fault.member, int):
            # check_schedule has refused an index out of range already.
            hit = [fault.member] if fault.member < len(addresses) else []
        else:
            hit = list(range(len(addresses)))
        for member in hit:
            shared = [i for i, a in enumerate(addresses) if a == addresses[member] and i != member]
            if not shared:
                continue
            need = (
                f"member {member} needs a host of its own"
                if isinstance(fault.member, int)
                else f"the {fault.member} is named only at run time: every member needs a host"
                " of its own"
            )
            raise ValueError(
                f"{where}: host {addresses[member]} runs members {member} and {shared[0]};"
                f" isolate cuts a whole host off the network, so {need}"
            )
