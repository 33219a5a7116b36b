"""The boundary to the native load engine (``dbtester._engine``, Rust): a plan
goes in, progress counters are polled, the records come out.

Python never runs per request. :func:`plan` turns a workload into the
engine's plan (the ``Plan`` TypedDict of ``dbtester/_engine.pyi``, its shape
written once); :func:`start` hands it over and returns the running ``Load``.
Defaults and bounds come from the test-case model; the engine checks types
and what it needs (memory, key numbers that fit) and raises ValueError naming
the key for anything it cannot run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dbtester.databases import get_kind
from dbtester.databases.base import LoadSettings, TlsFiles
from dbtester.errors import DbtesterError
from dbtester.results import (
    OK,
    CheckedOperations,
    CompactionRecord,
    InformerLags,
    InformerRecord,
    LockHolds,
    Records,
    SessionExpiry,
    WatchEvents,
)
from dbtester.workloads import Workload
from dbtester.workloads.base import only

if TYPE_CHECKING:
    from dbtester._engine import CheckPlan, Load, Plan, TlsPlan

__all__ = [
    "EngineMissingError",
    "Load",
    "Operation",
    "Plan",
    "load_phase",
    "plan",
    "records_of",
    "single_operation",
    "start",
]

#: the engine's operations, as the plan's ``mix`` names them
Operation = Literal["read", "update", "insert", "read_modify_write"]


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
    first_key: int = 0,
    existing: int | None = None,
    write_id_base: int = 0,
    expire_sessions: Sequence[tuple[float, int]] = (),
) -> Plan:
    """The engine's plan for ``workload`` against ``settings.endpoints``.

    ``first_key`` moves a write workload's keys (a warm-up writes the numbers
    after the measured load's). ``existing`` is how many keys a load that
    chooses among keys finds before it (default: its own load phase's) and
    ``write_id_base`` keeps this run's writes apart from earlier ones;
    ``expire_sessions`` are a lock load's crashes, (seconds after its start,
    lock)."""
    target = get_kind(kind).engine_target(settings)
    built: Plan = {
        "protocol": target["protocol"],
        "endpoints": target["endpoints"],
        "options": target["options"],
        "key_size": settings.key_size,
        "value_size": settings.value_size,
        "values": workload.VALUES,
        "keys": workload.plan_keys(first_key, existing),
        "mix": workload.plan_mix(),
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
        "seed": seed,
        "write_id_base": write_id_base,
        "watch": workload.plan_watch(),
        "check": _check(workload),
        "objects": workload.plan_kubernetes(),
        "locks": workload.plan_locks(),
    }
    if built["locks"] is not None:
        built["locks"]["expire"] = [{"at_s": at, "lock": lock} for at, lock in expire_sessions]
    if settings.access.tls is not None:
        built["tls"] = _tls(settings.access.tls)
    if "auth" in target:
        built["auth"] = target["auth"]
    return built


def _tls(files: TlsFiles) -> TlsPlan:
    """The engine's TLS: the PEM text itself (load hosts have no such files)."""
    ca, cert, key = files.pem()
    return {
        "ca": ca.decode(),
        "cert": cert.decode() if cert else None,
        "key": key.decode() if key else None,
        "server_name": files.server_name,
    }


def _check(workload: Workload) -> CheckPlan | None:
    """The checked clients beside the load (none without ``check:``)."""
    if workload.check is None or not workload.check.runs_clients:
        return None
    return {"clients": workload.check.clients, "keys": workload.check.keys}


def load_phase(kind: str, settings: LoadSettings, workload: Workload, *, threads: int = 1) -> Plan:
    """A workload's load phase (YCSB's "load", not measured): its keys
    inserted, closed loop, with the workload's clients and connections."""
    phase = workload.load_phase()
    if phase is None:
        raise DbtesterError(f"type: {workload.type} has no load phase")
    return single_operation(kind, settings, phase, "insert", threads=threads)


def single_operation(
    kind: str,
    settings: LoadSettings,
    workload: Workload,
    operation: Operation,
    *,
    key: int = 0,
    threads: int = 1,
) -> Plan:
    """A plan that makes ``workload.requests`` of one operation: inserts of new
    keys from ``key`` on, or anything else on key number ``key`` alone (the
    readiness check's read). The workload's sizes, clients and pacing stay."""
    inserts = operation == "insert"
    built = plan(
        kind, settings, workload, threads=threads, first_key=key, existing=0 if inserts else 1
    )
    built["mix"] = only(operation)
    built["check"] = None  # only the measured load has checked clients
    objects = built.get("objects")
    if objects is not None:  # its objects: create them from `key` on, or get that one
        objects["phase"], objects["first"] = ("load" if inserts else "read"), key
    keys = built["keys"]
    keys["choose"] = "same"
    if not inserts:
        keys["existing"], keys["insert_space"] = 1, 0
    return built


def start(load_plan: Plan) -> Load:
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


def watch_events_of(result: Mapping[str, Any], keys: int) -> WatchEvents | None:
    """What a watch load of ``keys`` puts had its watchers see (None for any
    other load)."""
    watch = result.get("watch")
    if watch is None:
        return None
    return WatchEvents(
        np.asarray(watch["watcher"], dtype=np.uint16),
        np.asarray(watch["key"], dtype=np.uint32),
        np.asarray(watch["latency_us"], dtype=np.uint32),
        np.asarray(watch["arrival_ms"], dtype=np.uint32),
        np.asarray(watch["seen"], dtype=np.uint64),
        np.asarray(watch["duplicates"], dtype=np.uint64),
        np.asarray(watch["out_of_order"], dtype=np.uint64),
        np.asarray(watch["foreign"], dtype=np.uint64),
        np.asarray(watch["coalesced"], dtype=np.uint64),
        np.asarray(watch["split"], dtype=np.uint64),
        int(watch["origin_unix_ns"]),
        np.asarray(watch["acked"], dtype=np.uint64),
        keys,
        np.asarray(watch["sent_ms"], dtype=np.uint32),
        np.asarray(watch["duplicate_watcher"], dtype=np.uint16),
        np.asarray(watch["duplicate_ms"], dtype=np.uint32),
    )


def checked_operations_of(result: Mapping[str, Any]) -> CheckedOperations | None:
    """What the checked clients did (None without them)."""
    check = result.get("check")
    if check is None:
        return None
    return CheckedOperations.of(check)


def compactions_of(result: Mapping[str, Any]) -> tuple[CompactionRecord, ...]:
    """The compactions a Kubernetes load made (none for the other types)."""
    return tuple(
        CompactionRecord(started_unix=start / 1e9, ended_unix=end / 1e9, revision=revision)
        for start, end, revision in result.get("compactions", ())
    )


def expirations_of(result: Mapping[str, Any]) -> tuple[tuple[float, int], ...]:
    """A Kubernetes load's events seen expiring: each second's start (unix
    s) and how many, seconds without any left out (none for the others)."""
    return tuple((start / 1e9, int(count)) for start, count in result.get("expirations", ()))


def lock_holds_of(result: Mapping[str, Any]) -> LockHolds | None:
    """What a lock load's lockers held (None for the other types: they open
    no lock sessions)."""
    if "lock_sessions" not in result.get("counters", {}):
        return None
    return LockHolds.of(result.get("holds", ()))


def session_expiries_of(
    result: Mapping[str, Any], holds: LockHolds | None
) -> tuple[SessionExpiry, ...]:
    """The holders a lock load's ``expire_session`` faults made crash, each
    with when its lock had a new holder (none for the other types)."""
    if holds is None:
        return ()
    found = []
    for number, lock, locker, crashed_ns in result.get("expired", ()):
        regained = holds.regained(int(lock), int(crashed_ns))
        found.append(
            SessionExpiry(
                number=int(number),
                lock=int(lock),
                locker=int(locker),
                unix=crashed_ns / 1e9,
                regained_unix=None if regained is None else regained / 1e9,
            )
        )
    return tuple(found)


def informers_of(
    result: Mapping[str, Any],
) -> tuple[tuple[InformerRecord, ...], InformerLags | None]:
    """What a Kubernetes load's informers did, and their events' lags
    (none, and None, without informers)."""
    informed = result.get("informers") or []
    if not informed:
        return (), None
    records = tuple(
        InformerRecord(
            synced_s=int(i["synced_us"]) / 1e6,
            relists=int(i["relists"]),
            resumes=int(i["resumes"]),
            events=int(i["events"]),
            converged=bool(i["converged"]),
            problems=tuple(str(p) for p in i["problems"]),
            problem_count=int(i["problem_count"]),
        )
        for i in informed
    )
    return records, InformerLags.of([i["lags_us"] for i in informed])


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
        np.asarray(result["op"], dtype=np.uint8),
        np.asarray(result["queued"], dtype=np.uint8) if "queued" in result else None,
    )
