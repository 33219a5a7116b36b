"""Test cases (the dicts a test writes as YAML) with small defaults: every
key overridable, the workload's one by one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster import VERSIONS

__all__ = ["FAST_CONSUL", "WORKLOAD", "database", "fast_elections", "make_case", "write_case"]

#: a small write load: what most tests need, and quick
WORKLOAD: dict[str, Any] = {
    "type": "write",
    "requests": 1000,
    "key_size": 64,
    "value_size": 256,
    "clients": 20,
    "connections": 4,
}


#: Consul's flags for its elections at production timing (its default,
#: raft_multiplier 5, is for small machines): for a test whose point is not
#: Consul's own timing. One member elects itself in about 2 s rather than 9,
#: three in 1-2 s rather than 5-10, and a killed leader's successor is named
#: within about 2 s rather than 7.
FAST_CONSUL: dict[str, Any] = {"raft_multiplier": 1}


def fast_elections(kind: str) -> dict[str, Any]:
    """:func:`database`'s keys for ``kind`` at production election timing:
    :data:`FAST_CONSUL` for Consul, none for the other kinds (theirs are)."""
    return {"flags": dict(FAST_CONSUL)} if kind == "consul" else {}


def database(
    id: str, kind: str = "etcd", version: str | None = None, **keys: Any
) -> dict[str, Any]:
    """One ``databases:`` entry: ``kind`` at the tests' version, one member
    unless ``endpoints`` or ``hosts`` say where it runs; ``keys`` add or
    override."""
    entry: dict[str, Any] = {"id": id, "kind": kind, "version": version or VERSIONS[kind]}
    if "endpoints" not in keys and "hosts" not in keys:
        entry["members"] = 1
    return entry | keys


def make_case(
    *,
    workload: Mapping[str, Any] | None = None,
    databases: list[dict[str, Any]] | None = None,
    title: str = "test",
    **top: Any,
) -> dict[str, Any]:
    """A test case: :data:`WORKLOAD` with ``workload``'s keys over it (a key
    given None is left out), ``databases`` (default: one 1-member etcd "etcd"),
    and any other top-level keys in ``top``."""
    load = {k: v for k, v in (WORKLOAD | dict(workload or {})).items() if v is not None}
    return {
        "title": title,
        "workload": load,
        "databases": databases if databases is not None else [database("etcd")],
        **top,
    }


def write_case(path: Path, case: Mapping[str, Any]) -> Path:
    """``case`` as YAML into ``path``; ``path``."""
    path.write_text(yaml.safe_dump(dict(case), sort_keys=False))
    return path
