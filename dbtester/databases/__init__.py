"""Database kinds: one module each behind :class:`DatabaseKind`.

To add a kind, write ``dbtester/databases/<kind>.py`` with a DatabaseKind subclass
and list it in ``_KINDS`` below; nothing else in dbtester names a kind.
"""

from __future__ import annotations

from dbtester.databases.base import DatabaseKind, Options
from dbtester.databases.consul import Consul
from dbtester.databases.etcd import Etcd
from dbtester.databases.kine import Kine
from dbtester.databases.nats import Nats
from dbtester.databases.zookeeper import ZooKeeper

__all__ = ["KINDS", "DatabaseKind", "Options", "get_kind"]

_KINDS: tuple[DatabaseKind, ...] = (Etcd(), ZooKeeper(), Consul(), Kine(), Nats())
KINDS: dict[str, DatabaseKind] = {kind.name: kind for kind in _KINDS}


def get_kind(name: str) -> DatabaseKind:
    """The kind called ``name``; KeyError for an unknown one (config validation
    reports unknown kinds with the allowed list before this is ever reached)."""
    return KINDS[name]
