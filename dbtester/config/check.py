"""The workload's ``check:``: checked clients beside the measured load.

``check: {model: linearizability, clients: 8, keys: 8, on_violation: fail}``.
The clients run on connections of their own, one request at a time, reading
and writing ``keys`` keys of their own ("c0", "c1", ...) with unique values
while the load runs; their requests are in none of the load's figures.
Their history is checked per key (:mod:`dbtester.analyze.linearizable`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dbtester.util.keys import MAX_CHECKED

__all__ = ["MAX_CHECKED", "Check"]


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    model: Literal["linearizability"] = Field(
        "linearizability",
        description="what the checked clients' history is held to: each key a register",
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
