"""Scheduled faults: the test case's ``faults:``, applied to every database's
cluster during its load, at the same moments.

A fault is ``{at: 10s, action: kill, member: leader}``: ``at`` counts from the
load's start (``10s``, ``1.5s``, ``500ms``, ``2m`` or a number of seconds);
``member`` is an index, ``leader`` or ``follower`` (resolved by the database
kind at the moment of the fault). ``restart``, ``resume`` and ``heal`` undo
the latest ``kill`` / ``pause`` / ``isolate`` that is still in effect and name
no member of their own (they reach the member it hit, which may no longer be
the leader). ``isolate`` cuts a member's host off the network, so it needs
members on hosts of their own (:func:`check_isolation`); with
``keep_clients: true`` it cuts the member off its peers only, and its
clients still reach it (what it answers alone, a serializable read, may
then be stale).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dbtester.util.net import is_loopback

__all__ = [
    "MAX_AT_S",
    "UNDO",
    "UNDONE",
    "Fault",
    "check_isolation",
    "check_schedule",
    "parse_duration",
]

#: the action that undoes each one that takes a member out
UNDO = {"kill": "restart", "pause": "resume", "isolate": "heal"}
#: the other way round: what each undoing action undoes
UNDONE = {undo: action for action, undo in UNDO.items()}
#: a day: past any load dbtester runs
MAX_AT_S = 86_400.0
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m)\s*$")


def parse_duration(value: object) -> object:
    """``10s`` / ``1.5s`` / ``500ms`` / ``2m`` -> seconds; numbers pass (they are
    seconds); anything else is left for the model to refuse."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(
                f"{value!r} is not a duration: write seconds (10, 1.5) or 10s, 500ms, 2m"
            )
        return float(match.group(1)) * _UNITS[match.group(2)]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


class Fault(BaseModel):
    """One scheduled fault."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    at: float = Field(
        gt=0,
        le=MAX_AT_S,
        description="When, from the load's start: 10s, 1.5s, 500ms, 2m or a number of seconds",
    )
    action: Literal["kill", "restart", "pause", "resume", "isolate", "heal"] = Field(
        description="kill, pause and isolate take a member out; restart, resume and heal"
        " undo the latest one still in effect"
    )
    member: int | Literal["leader", "follower"] | None = Field(
        None,
        description="kill, pause, isolate: an index (from 0), leader or follower; the undoing"
        " actions take none",
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
        undoes = self.action in UNDONE
        if undoes and self.member is not None:
            raise ValueError(
                f"{self.action} takes no member: it undoes the latest"
                f" {UNDONE[self.action]} still in effect"
            )
        if not undoes and self.member is None:
            raise ValueError(f"{self.action} needs a member: an index, leader or follower")
        if self.keep_clients and self.action != "isolate":
            raise ValueError(
                f"keep_clients is for isolate (which clients may still reach), not {self.action}"
            )
        return self

    def describe(self) -> str:
        """e.g. ``kill leader at 10 s``."""
        who = f" member {self.member}" if isinstance(self.member, int) else f" {self.member}"
        peers = " from its peers" if self.keep_clients else ""
        return f"{self.action}{who if self.member is not None else ''}{peers} at {self.at:g} s"


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
        if isinstance(fault.member, int) and fault.member >= members:
            raise ValueError(
                f"{where}: member {fault.member} does not exist: a database here has"
                f" {members} member(s), indices 0..{members - 1}"
            )
        if fault.action in UNDO:
            out.append(fault.action)
            continue
        undone = UNDONE[fault.action]
        if not out or out[-1] != undone:
            raise ValueError(f"{where}: there is no {undone} in effect for it to undo")
        out.pop()


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
