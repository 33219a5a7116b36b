"""The workload's ``check:``: checked clients beside the measured load.

``check: {model: linearizability, clients: 8, keys: 8, on_violation: fail}``.
The clients run on connections of their own, one request at a time, reading
and writing ``keys`` keys of their own ("c0", "c1", ...) with unique values
while the load runs; their requests are in none of the load's figures.
Their history is checked per key (:mod:`dbtester.analyze.linearizable`).

``check: {model: watch, on_violation: fail}`` (``type: watch`` only) judges
the watchers themselves: an event missed, received twice or out of order,
or a revision split across replies, is a violation
(:func:`dbtester.analyze.correctness.judge_watch`); no checked clients run.

``check: {model: informer, on_violation: report}`` (``type: kubernetes``
with ``informers:``) judges the informers: an event delivered twice or out of
revision order, a copy that is not exactly a fresh list at the end, or an
informer that never caught up, is a violation
(:func:`dbtester.analyze.correctness.judge_informers`). Without ``check:``
a Kubernetes load's informers are judged so anyway, and a violation fails
the run.

``check: {model: lock}`` (``type: lock``) judges the lockers' acquisitions:
two holders of one lock at once on the engine's clock, or a fencing token no
higher than the previous holder's, is a violation
(:func:`dbtester.analyze.correctness.judge_locks`); a lock load is judged so
without ``check:`` too.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from dbtester.util.keys import MAX_CHECKED

__all__ = ["MAX_CHECKED", "Check"]


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    model: Literal["linearizability", "watch", "informer", "lock"] = Field(
        "linearizability",
        description="linearizability: checked clients' history, each key a register;"
        " watch (type: watch only): the watchers' events, in order, none missed or twice;"
        " informer (type: kubernetes only): each informer's copy of the objects, exactly"
        " a fresh list at the end, no event twice or out of order; lock (type: lock only):"
        " no two holders of a lock at once, each holder's fencing token above the last's",
    )
    clients: int = Field(
        8, ge=1, le=MAX_CHECKED, description="checked clients, one connection each"
    )
    keys: int = Field(8, ge=1, le=MAX_CHECKED, description="the keys they read and write")
    on_violation: Literal["fail", "report"] = Field(
        "fail",
        description="fail: a violation fails the run (exit 1); report: it is reported,"
        " and the run's exit status does not change",
    )

    @model_validator(mode="after")
    def _clients_only_for_registers(self) -> Check:
        given = sorted({"clients", "keys"} & self.model_fields_set)
        if not self.runs_clients and given:
            judged = {"watch": "watchers", "informer": "informers"}.get(self.model, "lockers")
            raise ValueError(
                f"{' and '.join(given)} set the checked clients of model: linearizability;"
                f" model: {self.model} judges the {judged} themselves: remove"
                f" {'them' if len(given) > 1 else 'it'}"
            )
        return self

    @model_serializer(mode="wrap")
    def _without_clients_for_watch(self, handler: SerializerFunctionWrapHandler) -> Any:
        # models watch and informer refuse clients and keys: written out, they would make
        # the results' config.yaml a test case that does not load
        data = handler(self)
        if not self.runs_clients and isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in ("clients", "keys")}
        return data

    @property
    def broken(self) -> str:
        """The words that open a violation's error."""
        if self.model == "watch":
            return "watch guarantees broken:"
        if self.model == "informer":
            return "informers broken:"
        if self.model == "lock":
            return "locks broken:"
        return "not linearizable: key"

    @property
    def runs_clients(self) -> bool:
        """Whether checked clients run beside the load (model: linearizability)."""
        return self.model == "linearizability"

    def describe(self) -> str:
        """One line for ``validate``."""
        then = "fails the run" if self.on_violation == "fail" else "is reported"
        if self.model == "watch":
            return f"every watcher held to the watch guarantees (a violation {then})"
        if self.model == "informer":
            return (
                "every informer's copy held to a fresh list at the end, its events to"
                f" revision order (a violation {then})"
            )
        if self.model == "lock":
            return (
                "every lock held by one locker at a time, its fencing tokens rising"
                f" (a violation {then})"
            )
        return (
            f"{self.clients} checked clients on {self.keys} keys held to linearizability"
            f" (a violation {then})"
        )
