"""The results directory's schema version, its history, and the upgrades that
let this dbtester read every older version it knows.

Every JSON file in a results directory (``result.json``, ``<db-id>/run.json``)
carries ``"schema_version": N``. A reader calls :func:`upgrade` first: older
versions are brought up to :data:`SCHEMA_VERSION` step by step, and a newer
one is refused with :class:`~dbtester.errors.SchemaVersionError` (exit 2),
naming the file and both versions.

Its history is :data:`HISTORY`, one entry per version (add one, and an
upgrade step, whenever what a file holds changes); the docs site prints it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dbtester.errors import ResultsError, SchemaVersionError

__all__ = ["HISTORY", "SCHEMA_VERSION", "upgrade", "version_of"]

SCHEMA_VERSION = 21

#: what each version changed, version 1 first (the docs site prints this)
HISTORY: tuple[str, ...] = (
    (
        'dbtester 0.1, the first release. ``run.json`` carried its version as ``"schema": 1``; '
        '``result.json`` as ``"schema_version": 1`` and gained its analysis (title, databases, '
        "figures) only once analysed."
    ),
    (
        'One key, ``"schema_version"``, in every file (``run.json`` had ``"schema"``). '
        "``result.json`` always has every field of ``RunSummary``: ``title`` empty and "
        "``databases`` an empty list until the analysis fills them. Nothing was removed: a "
        "version 1 file upgrades by renaming its key."
    ),
    (
        "Repeated trials. ``run.json`` has ``trial`` (null for a database's only trial, kept in "
        "``<db-id>/``; k for ``<db-id>/trial-<k>/``) and ``notes``. ``result.json`` has "
        "``repeat`` and ``comparisons`` (each database against the first), and per database "
        "``trials``, ``intervals`` (the 95% interval's half-width per row) and ``trial_figures`` "
        "(every trial's rows). Only keys were added, with defaults that describe a version 2 run: "
        "it upgrades as it is."
    ),
    (
        "Warm-up and faults. ``run.json`` has ``warmup`` (null, or the warm-up's window, CPU and "
        "outcome counts, in the form of ``load``; its requests are in no figure, but its writes "
        "are in ``verification``) and ``faults`` (the scheduled faults as they happened). Only "
        "keys were added, with defaults that describe a version 3 run: it upgrades as it is."
    ),
    (
        "Fault figures. ``result.json`` has, per database, ``faults``: what each scheduled fault "
        "did to the load (unavailability, recovery, errors by kind, p99 around it), per trial; "
        "its table rows are ``FAULT-<k>-...``. Only a key was added, empty for a run without "
        "faults: a version 4 file upgrades as it is."
    ),
    (
        "Operations. ``client-latency.npz`` has an ``op`` array (0 read, 1 update, 2 insert, 3 "
        "read-modify-write) beside the others, and a run's table gets per-operation rows where a "
        "database ran more than one; outcomes include ``conflict`` (a read-modify-write that lost "
        "its race), which is not an error. ``run.json`` has ``load_phase`` (null, or a mixed "
        "workload's load phase, in the form of ``warmup``). Only a key was added: a version 5 "
        "file upgrades as it is, and its records (without ``op``) read as operations not "
        "recorded."
    ),
    (
        "Trials until decided. ``result.json`` has ``sequential`` (null, or for a ``repeat: "
        "auto`` run why its trials stopped and each database's decision on each stopping metric). "
        "Only a key was added: a version 6 file upgrades as it is."
    ),
    (
        "The servers' machines. ``run.json`` has, per member, ``machine`` (its host's CPU "
        "model, cores, memory and kernel, as its agent described it) and ``binary_sha256`` (a "
        "digest of the installed files it ran); ``result.json`` has, per database, ``servers`` "
        "(each distinct machine once) and ``binaries``, so that ``compare`` and ``history "
        "--check`` can refuse to judge runs measured on different hardware. The per-second "
        "metrics files (``server-<i>-metrics.csv``, ``client-metrics.csv``) end with the "
        "host-speed probe's ``probe_ns`` (CPU nanoseconds of a fixed piece of work; higher is "
        "slower) and ``steal_ms`` (the host's steal time), and the table gets ``HOST-SPEED`` "
        "and ``HOST-SPEED-CV`` where they were recorded. Only keys and columns were added: a "
        "version 7 directory upgrades as it is, its servers and host speed unknown."
    ),
    (
        "Searches. ``run.json`` has ``search`` (null, or for a test case with ``search:`` its "
        "target, every probe's offered and answered rate, latency, trend, engine lag and "
        "verdict, and what the search established); each probe's requests are in "
        "``<db-id>/probe-<n>/``, and the trial's own files hold the highest passing probe's. "
        "``result.json``'s table gets ``MAX-SUSTAINABLE-THROUGHPUT`` for such runs. Only keys "
        "were added: a version 8 directory upgrades as it is."
    ),
    (
        "Watch and correctness. ``<db-id>/watch-events.npz`` holds a watch load's events (every "
        "event each watcher received, the puts' send times, the duplicates' arrivals); "
        "``result.json``'s fault summaries have ``watch_missed``, ``watch_duplicated`` and "
        "``watch_p99_ms`` for such loads. ``<db-id>/check-history.npz`` holds the checked "
        "clients' operations of a workload with ``check:``, and ``run.json`` has "
        "``correctness`` (null, or their history's verdict and its first violation; for "
        "``check: {model: watch}``, the watchers' verdict, with its counts in "
        "``correctness.watch``). Only keys "
        "and files were added: a version 9 directory upgrades as it is."
    ),
    (
        "Several load hosts. ``run.json`` has ``load_hosts`` (empty, or for a test case with "
        "``load_hosts:`` each host's share of the load, its clock offset and start skew, its "
        "outcome counts, throughput and CPU, and whether its engine was at its CPU limit); "
        "``<db-id>/client-<i>-metrics.csv`` and ``client-<i>-latency.npz`` hold load host *i*'s "
        "samples and records (on the controller's clock; ``client-latency.npz`` holds every "
        "host's, merged), and there is no ``client-metrics.csv``. Only keys and files were "
        "added: a version 10 directory upgrades as it is."
    ),
    (
        "Maintenance events. A fault record in ``run.json`` may be a maintenance event "
        "(``compact``, ``defrag``, ``snapshot``, ``transfer_leader``, ``upgrade``) with "
        "``end_unix`` (when it finished) and ``detail`` (what it did), an upgrade with ``to`` "
        "(the version its member ran next); a fault window in ``result.json`` has "
        "``took_s`` and ``detail``, and its rows ``FAULT-<k>-TOOK-SECONDS``. Only keys were "
        "added: a version 11 directory upgrades as it is."
    ),
    (
        "A slow disk. A fault record in ``run.json`` may be ``slow_disk`` with ``fsync_ms`` "
        "(what each fsync of its member waited longer) or ``restore_disk``. Only a key was "
        "added: a version 12 directory upgrades as it is."
    ),
    (
        "Companion servers. ``<db-id>/server-<i>-<name>-metrics.csv`` and "
        "``server-<i>-<name>.log`` hold the samples (the columns of ``server-<i>-metrics.csv``) "
        "and output of a server member *i*'s agent ran beside it (kine's PostgreSQL: "
        "``postgres``), and the table gets ``SERVER-<NAME>-MAX-CPU-USAGE`` and "
        "``SERVER-<NAME>-MAX-MEMORY-USAGE`` for them. ``run.json`` has ``not_found_outcome`` "
        "(the engine's outcome for a read of a key that is not there: ZooKeeper's ``NoNode``, "
        "NATS's ``key-not-found``; empty where such a read is ok), which names a mixed load's "
        "stale reads (``STALE-READS``). Files and a key were added: a version 13 run.json gets "
        "what the analysis took then (ZooKeeper's ``NoNode``; other kinds none), so it "
        "re-renders the same."
    ),
    (
        "Kubernetes' traffic. The ``op`` array's codes go on: 4 get, 5 list, 6 create, 7 delete "
        "(a ``type: kubernetes`` load; its update is 1). ``run.json``'s ``load`` (and "
        "``warmup``) has ``counters``: what the workload counted beside the requests, by name "
        "(update and delete conflicts and retries, skipped creates and deletes, list pages, "
        "objects and bytes, and ``objects_low``/``objects_high``, the objects the end must "
        "find); empty for the other types. Only a key was added: a version 14 directory "
        "upgrades as it is."
    ),
    (
        "Compactions and informers. ``run.json``'s ``load`` has ``compactions``: each "
        "compaction a ``type: kubernetes`` load made (``started_unix``, ``ended_unix``: its "
        "Compact request's send and reply, which waits for the old revisions' removal; "
        "``revision``), and ``informers``: each informer's time to its first list, relists, "
        "resumed watches, events, whether it converged and what it found wrong; "
        "``informer-lags.npz`` has each stamped event's lag. Empty for the other types. Only "
        "keys and a file were added: a version 15 directory upgrades as it is."
    ),
    (
        "Events and the informer check. ``client-latency.npz``'s ``op`` 8 is ``event`` (an "
        "event's create, leased); ``run.json``'s ``load`` has ``expirations``: each second's "
        "start (unix s) and the events seen expiring in it. ``run.json``'s ``correctness`` "
        "may have ``model`` "
        '``"informer"``: a ``type: kubernetes`` load\'s informers judged (``clients``: the '
        "informers, ``operations``: their events, ``violated_keys``: the informers found "
        "wrong, ``violation``: the first, its ``key`` naming it). A version 16 file upgrades as "
        "it is."
    ),
    (
        "The database's own size. A member's ``server-<i>-metrics.csv`` ends with ``db_bytes`` "
        "and ``db_in_use_bytes`` where its kind reports them (etcd's dbSize and dbSizeInUse, "
        "read each second; -1 in a second the member did not answer), and the table has "
        "SERVER-MAX-DB-SIZE and SERVER-MAX-DB-SIZE-IN-USE. Only columns and rows were added: "
        "a version 17 directory upgrades as it is, without them."
    ),
    (
        "Slices compared in pairs. ``run.json`` has ``slice_s``: under ``interleave: slices``, "
        "the length of the slice this trial was (null for a trial on a fresh cluster); "
        "``result.json``'s ``comparisons`` have ``paired``: true where the databases' slices "
        "were compared round by round (a paired t-test), false for Welch's test over "
        "independent trials. A version 18 file upgrades as it is: its trials were compared "
        "by Welch's test."
    ),
    (
        "Locks. ``client-latency.npz``'s ``op`` 9 is ``acquire`` (a ``type: lock`` load's "
        "acquisition, timed to the reply that says the lock is held); ``lock-holds.npz`` has "
        "every acquisition's lock, locker, send, acquisition, release and fencing token; "
        "``run.json``'s ``load`` counters have ``lock_sessions`` and ``failed_releases``, and "
        '``correctness`` may have ``model`` ``"lock"`` (``keys``: the locks, ``operations``: '
        "the acquisitions, ``violated_keys``: the locks held by two at once or with a token "
        "that did not rise). Only a value, a file and keys were added: a version 19 directory "
        "upgrades as it is."
    ),
    (
        "Session expiry. ``run.json``'s faults may have ``action`` ``expire_session`` with "
        "``lock`` (the lock whose holder crashed; ``unix``: when it did, ``end_unix``: when "
        "another locker held the lock, or the load ended); ``result.json``'s fault summaries "
        "of a lock load have ``lock``, ``locks_held`` (locks held when the fault struck) and "
        "``lock_recovery_s`` (until each had a new holder; null: not within the load). Only "
        "keys were added: a version 20 directory upgrades as it is."
    ),
)

#: the key a file of each version names its version by
_VERSION_KEYS = ("schema_version", "schema")

Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    data = dict(data)
    data.pop("schema", None)
    data["schema_version"] = 2
    return data


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 3}


def _v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 4}


def _v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 5}


def _v5_to_v6(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 6}


def _v6_to_v7(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 7}


def _v7_to_v8(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 8}


def _v8_to_v9(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 9}


def _v9_to_v10(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 10}


def _v10_to_v11(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 11}


def _v11_to_v12(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 12}


def _v12_to_v13(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 13}


#: what the analysis of schema 13 and before took for a missing key's outcome,
#: by kind (a fact of those versions, kept so that their runs re-render the
#: same; from 14 each run records its kind's own: ``not_found_outcome``)
_MISSING_KEY_UNTIL_14 = {"zookeeper": "NoNode"}


def _v13_to_v14(data: dict[str, Any]) -> dict[str, Any]:
    database = data.get("database")
    kind = str(database.get("kind")) if isinstance(database, dict) else ""
    if kind in _MISSING_KEY_UNTIL_14 and "not_found_outcome" not in data:
        data = {**data, "not_found_outcome": _MISSING_KEY_UNTIL_14[kind]}
    return {**data, "schema_version": 14}


def _v14_to_v15(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 15}


def _v15_to_v16(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 16}


def _v16_to_v17(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 17}


def _v17_to_v18(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 18}


def _v18_to_v19(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 19}


def _v19_to_v20(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 20}


def _v20_to_v21(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 21}


#: version N -> the step that turns a version N file into version N + 1
UPGRADES: Mapping[int, Upgrade] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
    7: _v7_to_v8,
    8: _v8_to_v9,
    9: _v9_to_v10,
    10: _v10_to_v11,
    11: _v11_to_v12,
    12: _v12_to_v13,
    13: _v13_to_v14,
    14: _v14_to_v15,
    15: _v15_to_v16,
    16: _v16_to_v17,
    17: _v17_to_v18,
    18: _v18_to_v19,
    19: _v19_to_v20,
    20: _v20_to_v21,
}


def version_of(data: Mapping[str, Any], path: Path) -> int:
    for key in _VERSION_KEYS:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise ResultsError(path, f"schema version {value} is not a version")
            return value
    raise ResultsError(path, "no schema_version: not a file dbtester wrote")


def upgrade(data: Any, path: Path) -> dict[str, Any]:
    """``data`` (a JSON file's content) in the current schema; refuses a newer one."""
    if not isinstance(data, dict):
        raise ResultsError(path, f"expected a JSON object, found {type(data).__name__}")
    current: dict[str, Any] = data
    version = version_of(current, path)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(path, version, SCHEMA_VERSION)
    while version < SCHEMA_VERSION:
        current = UPGRADES[version](current)
        version += 1
    return current
