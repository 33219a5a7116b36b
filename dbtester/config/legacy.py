"""Read the original (Go) dbtester's test-case format and convert it.

The original kept one ``benchmark_options`` block per database, output paths
for every intermediate CSV, plot and README lists, and per-kind option blocks
keyed by the database id. We carry over what has a meaning in dbtester's
schema, and turn everything else into a visible warning: in particular keys the
original silently ignored (its configs say ``snap_count``, its schema read
``snapshot_count``). Positions of converted values point at the old file, so
validation errors still name the right line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

from dbtester.config.source import KeyPath, Position, SourceDoc, quoted
from dbtester.databases import KINDS
from dbtester.errors import ConfigError, Problem
from dbtester.workloads import TYPES

__all__ = ["convert", "is_legacy"]

CONTROL = "datatbase_id_to_config_client_machine_agent_control"  # sic, as the original
ANALYZE = "datatbase_id_to_config_analyze_machine_initial"
CLIENT = "config_client_machine_initial"

TOP_KEYS = {
    "test_title",
    "test_description",
    CLIENT,
    "all_database_id_list",
    CONTROL,
    ANALYZE,
    "analyze_all_aggregated_output",
    "analyze_plot_path_prefix",
    "analyze_plot_list",
    "analyze_readme",
}
CLIENT_KEYS = {
    "path_prefix",
    "log_path",
    "client_system_metrics_path",
    "client_system_metrics_interpolated_path",
    "client_latency_throughput_timeseries_path",
    "client_latency_distribution_all_path",
    "client_latency_distribution_percentile_path",
    "client_latency_distribution_summary_path",
    "client_latency_by_key_number_path",
    "server_disk_space_usage_summary_path",
    "google_cloud_project_name",
    "google_cloud_storage_key_path",
    "google_cloud_storage_bucket_name",
    "google_cloud_storage_sub_directory",
}
DB_KEYS = {
    "database_description",
    "peer_ips",
    "database_port_to_connect",
    "agent_port_to_connect",
    "benchmark_options",
    "benchmark_steps",
}
OPTION_KEYS = {
    "type": "type",
    "request_number": "requests",
    "connection_number": "connections",
    "client_number": "clients",
    "connection_client_numbers": "client_steps",
    "rate_limit_requests_per_second": "rate",
    "same_key": "same_key",
    "key_size_bytes": "key_size",
    "value_size_bytes": "value_size",
    "stale_read": "consistency",
}
STEP_KEYS = {
    "step1_start_database",
    "step2_stress_database",
    "step3_stop_database",
    "step4_upload_logs",
}


def is_legacy(data: dict[str, Any]) -> bool:
    return "test_title" in data or "all_database_id_list" in data or CONTROL in data


class _Converter:
    def __init__(self, doc: SourceDoc) -> None:
        self.old = doc
        self.new = SourceDoc(doc.file, None)
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []

    # -- bookkeeping: every new path remembers the old path it came from
    def put(self, new: KeyPath, old: KeyPath) -> None:
        self.new.values[new] = self.old.position(old)
        if old in self.old.keys:
            self.new.keys[new] = self.old.keys[old]

    def warn(self, old: KeyPath, message: str) -> None:
        self.warnings.append(self.old.problem(old, message, key=True))

    def check_keys(self, old: KeyPath, value: Any, allowed: Iterable[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.errors.append(self.old.problem(old, "expected a mapping of keys"))
            return {}
        known = sorted(allowed)
        for key in value:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                self.errors.append(
                    self.old.problem(
                        (*old, key),
                        f"unknown key {quoted(key)} in the original dbtester format{hint}",
                        key=True,
                    )
                )
        return value

    # -- the conversion
    def run(self) -> dict[str, Any]:
        data = self.check_keys((), self.old.data, TOP_KEYS)
        out: dict[str, Any] = {"title": data.get("test_title", "")}
        self.put(("title",), ("test_title",))
        if "test_description" in data:
            out["description"] = data["test_description"]
            self.put(("description",), ("test_description",))
        publish = self.client_section(data.get(CLIENT, {}))
        ids = self.database_ids(data.get("all_database_id_list"))
        control = self.check_keys((CONTROL,), data.get(CONTROL, {}), ids)
        databases: list[dict[str, Any]] = []
        workloads: list[dict[str, Any]] = []
        for i, old_id in enumerate(ids):
            if old_id not in control:
                self.errors.append(
                    self.old.problem(
                        ("all_database_id_list", i),
                        f"{quoted(old_id)} has no entry under {CONTROL}",
                    )
                )
                continue
            db, workload = self.database(len(databases), str(old_id), control[old_id])
            databases.append(db)
            workloads.append(workload)
        if workloads:
            out["workload"] = workloads[0]
            for db, workload in zip(databases, workloads, strict=True):
                override = {k: v for k, v in workload.items() if workloads[0].get(k) != v}
                if override:
                    db["workload"] = override
            self.put(("workload",), (CONTROL, ids[0], "benchmark_options"))
            for key in workloads[0]:
                self.put(
                    ("workload", key), (CONTROL, ids[0], "benchmark_options", _old_option(key))
                )
        out["databases"] = databases
        self.put(("databases",), ("all_database_id_list",))
        if publish:
            out["publish"] = {"url": publish}
        for key in sorted(TOP_KEYS & set(data)):
            if key.startswith("analyze") or key == ANALYZE:
                self.warn(
                    (key,),
                    f"'{key}' dropped: dbtester writes its table, charts and"
                    " README to a fixed results layout",
                )
        return out

    def database_ids(self, value: Any) -> list[str]:
        """The ids in ``all_database_id_list``; anything but a list of text is an error."""
        if not value:
            return []
        where: KeyPath = ("all_database_id_list",)
        if not isinstance(value, list):
            self.errors.append(self.old.problem(where, "expected a list of database ids"))
            return []
        ids = []
        for i, item in enumerate(value):
            if isinstance(item, str) and item:
                ids.append(item)
            else:
                self.errors.append(
                    self.old.problem(
                        (*where, i), f"expected a database id such as etcd__v3_5, got {item!r}"
                    )
                )
        return ids

    def client_section(self, section: Any) -> str | None:
        values = self.check_keys((CLIENT,), section, CLIENT_KEYS)
        paths = sorted(k for k in values if k.endswith("_path") or k == "path_prefix")
        paths = [k for k in paths if k != "google_cloud_storage_key_path"]
        if paths:
            self.warn(
                (CLIENT, paths[0]),
                f"output paths dropped ({', '.join(paths)}): dbtester"
                " writes every file to a fixed results layout under --out",
            )
        if "google_cloud_storage_key_path" in values:
            self.warn(
                (CLIENT, "google_cloud_storage_key_path"),
                "the key path is not carried"
                " over: credentials come from the environment"
                " (GOOGLE_APPLICATION_CREDENTIALS)",
            )
        if "google_cloud_project_name" in values:
            self.warn(
                (CLIENT, "google_cloud_project_name"),
                "the project name is not needed to publish to a bucket; dropped",
            )
        bucket = values.get("google_cloud_storage_bucket_name")
        if not bucket:
            return None
        sub = str(values.get("google_cloud_storage_sub_directory") or "").strip("/")
        self.put(("publish",), (CLIENT, "google_cloud_storage_bucket_name"))
        self.put(("publish", "url"), (CLIENT, "google_cloud_storage_bucket_name"))
        return f"gs://{bucket}/{sub}" if sub else f"gs://{bucket}"

    def database(self, i: int, old_id: str, entry: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        where: KeyPath = (CONTROL, old_id)
        kind_name = old_id.split("__", 1)[0]
        values = self.check_keys(where, entry, DB_KEYS | {old_id})
        description = str(values.get("database_description", ""))
        db: dict[str, Any] = {
            "id": _new_id(old_id),
            "kind": kind_name,
            "version": self.version(where, old_id, description),
        }
        self.put(("databases", i), where)
        self.put(("databases", i, "id"), where)
        self.put(("databases", i, "kind"), where)
        self.put(("databases", i, "version"), (*where, "database_description"))
        if description:
            db["description"] = description
            self.put(("databases", i, "description"), (*where, "database_description"))
        hosts = self.hosts(i, where, values)
        if hosts:
            db["hosts"] = hosts
        kind = KINDS.get(kind_name)
        block = values.get(old_id) or {}
        if not isinstance(block, dict):
            self.errors.append(self.old.problem((*where, old_id), "expected a mapping of keys"))
        elif kind is not None:
            flags, notes = kind.convert_legacy_flags(block)
            for key, note in notes:
                self.warn((*where, old_id, key), note)
            if flags:
                db["flags"] = flags
                self.put(("databases", i, "flags"), (*where, old_id))
        if (
            kind is not None
            and values.get("database_port_to_connect", kind.client_port) != kind.client_port
        ):
            self.warn(
                (*where, "database_port_to_connect"),
                f"dbtester connects to {kind.name}'s"
                f" standard client port {kind.client_port}; this setting was dropped",
            )
        steps = self.check_keys(
            (*where, "benchmark_steps"), values.get("benchmark_steps", {}), STEP_KEYS
        )
        skipped = sorted(k for k, v in steps.items() if v is False)
        if skipped:
            self.warn(
                (*where, "benchmark_steps"),
                f"steps cannot be skipped ({', '.join(skipped)}"
                " were false): dbtester always starts, loads, stops and collects",
            )
        workload = self.workload((*where, "benchmark_options"), values.get("benchmark_options"))
        for key in workload:
            self.put(
                ("databases", i, "workload", key), (*where, "benchmark_options", _old_option(key))
            )
        return db, workload

    def version(self, where: KeyPath, old_id: str, description: str) -> str:
        found = re.search(r"(?<![0-9A-Za-z])[vr]?(\d+\.\d+[0-9A-Za-z._+~-]*)", description)
        if found:
            return found.group(1)
        tail = old_id.split("__", 1)[-1].lstrip("vr").replace("_", ".")
        self.warn(where, f"no version in the description; using {quoted(tail)} from the id")
        return tail

    def hosts(self, i: int, where: KeyPath, values: dict[str, Any]) -> list[dict[str, Any]]:
        port = values.get("agent_port_to_connect", 3500)
        ips = values.get("peer_ips") or []
        if not isinstance(ips, list):
            self.errors.append(
                self.old.problem((*where, "peer_ips"), "expected a list of addresses")
            )
            return []
        for j in range(len(ips)):
            self.put(("databases", i, "hosts", j), (*where, "peer_ips", j))
            self.put(("databases", i, "hosts", j, "address"), (*where, "peer_ips", j))
            self.put(("databases", i, "hosts", j, "agent_port"), (*where, "agent_port_to_connect"))
        self.put(("databases", i, "hosts"), (*where, "peer_ips"))
        return [{"address": ip, "agent_port": port} for ip in ips]

    def workload(self, where: KeyPath, options: Any) -> dict[str, Any]:
        if options is None:
            self.errors.append(self.old.problem(where, "missing benchmark_options"))
            return {}
        values = self.check_keys(where, options, OPTION_KEYS)
        out: dict[str, Any] = {}
        for old_key, new_key in OPTION_KEYS.items():
            if old_key in values:
                out[new_key] = values[old_key]
        steps = out.get("client_steps")
        if isinstance(steps, list) and steps:
            # The original ran each step with as many connections as clients.
            top = (
                max(s for s in steps if isinstance(s, int))
                if all(isinstance(s, int) for s in steps)
                else None
            )
            if top is not None:
                out["clients"] = out["connections"] = top
                self.warn(
                    (*where, "connection_client_numbers"),
                    "each client step now shares"
                    " min(connections, clients) connections; set to the largest step so"
                    " every step runs as the original did (one connection per client)",
                )
        elif isinstance(steps, list):
            out.pop("client_steps")
        stale = out.pop("consistency", None)
        workload_type = TYPES.get(str(out.get("type")))
        if workload_type is not None:
            for key in workload_type.IGNORED:  # e.g. a read always reads one key
                out.pop(key, None)
            if stale is not None and "consistency" in workload_type.model_fields:
                out["consistency"] = "serializable" if stale else "linearizable"
        return out


def _old_option(new_key: str) -> str:
    for old, new in OPTION_KEYS.items():
        if new == new_key:
            return old
    return new_key


def _new_id(old_id: str) -> str:
    """'etcd__v3_3' -> 'etcd-v3.3': readable and valid in the new id pattern."""
    kind, _, rest = old_id.partition("__")
    new = f"{kind}-{rest.replace('_', '.')}" if rest else kind
    return re.sub(r"[^a-z0-9._-]", "-", new.lower())


def convert(doc: SourceDoc) -> tuple[SourceDoc, list[Problem]]:
    """The new-format document for an old-format one, and the conversion warnings."""
    converter = _Converter(doc)
    converter.new.data = converter.run()
    if converter.errors:
        raise ConfigError(converter.errors)
    converter.new.values.setdefault((), Position(1, 1))
    return converter.new, converter.warnings
