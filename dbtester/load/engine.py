"""The boundary to the native load engine (``dbtester._engine``, Rust): a plan
goes in, progress counters are polled, the records come out.

Python never runs per request. :func:`plan` turns a workload into the
engine's plan (a dict of plain values); :func:`start` hands it over and
returns the running ``Load`` (see ``dbtester/_engine.pyi``). The engine validates the plan again and
raises ValueError naming the key for anything it cannot run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dbtester.config.model import Workload
from dbtester.databases import get_kind
from dbtester.databases.base import LoadSettings
from dbtester.errors import DbtesterError
from dbtester.results import OK, Records

if TYPE_CHECKING:
    from dbtester._engine import Load

__all__ = ["EngineMissingError", "Load", "plan", "records_of", "start"]


class EngineMissingError(DbtesterError):
    """dbtester was installed without its compiled load engine."""


def plan(
    kind: str,
    settings: LoadSettings,
    workload: Workload,
    *,
    threads: int = 1,
    seed: int = 1,
    max_errors: int | None = None,
) -> dict[str, Any]:
    """The engine's plan for ``workload`` against ``settings.endpoints``."""
    read = workload.type == "read"
    return {
        **get_kind(kind).engine_target(settings),
        "operation": workload.type,
        "key_size": settings.key_size,
        "value_size": settings.value_size,
        "key_space": workload.requests,
        "sequential_keys": workload.sequential_keys,
        # A read workload reads the one seeded key, request after request.
        "same_key": settings.same_key or read,
        "seed": seed,
        "consistency": settings.consistency,
        "timeout_s": settings.timeout_s,
        "steps": [
            {
                "clients": clients,
                "connections": connections,
                "requests": requests,
                "rate": float(workload.rate),
            }
            for clients, connections, requests in workload.step_plan()
        ],
        "threads": threads,
        "max_errors": max_errors,
    }


def start(load_plan: dict[str, Any]) -> Load:
    try:
        from dbtester import _engine
    except ImportError as exc:
        raise EngineMissingError(
            f"dbtester's load engine is not built ({exc}): reinstall dbtester from its"
            " source tree (`make setup`, or `pip install -e .` with Rust's cargo on PATH)"
        ) from None
    try:
        return _engine.start(load_plan)
    except ValueError as exc:  # the plan is built from a checked test case: a bug if so
        raise DbtesterError(f"the load engine refused its plan: {exc}") from None
    except MemoryError as exc:  # the records of every request are reserved up front
        raise DbtesterError(f"not enough memory for this load: {exc}") from None


def records_of(result: Mapping[str, Any]) -> Records:
    """The engine's result as :class:`Records` (the arrays are not copied)."""
    codes = [str(c) for c in result["codes"]]
    if not codes or codes[0] != OK:
        raise DbtesterError(f"the load engine's outcome table is malformed: {codes[:3]}")
    return Records(
        np.asarray(result["due_ns"], dtype=np.int64),
        np.asarray(result["latency_ns"], dtype=np.int64),
        np.asarray(result["service_ns"], dtype=np.int64),
        np.asarray(result["code"], dtype=np.uint8),
        np.asarray(result["step"], dtype=np.uint16),
        codes,
    )
