"""Apache ZooKeeper: ensemble flags, JVM settings and how to install a version."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import Field, model_validator

from dbtester.databases.base import DatabaseKind, LegacyFlags, Options
from dbtester.install import (
    ArchiveDownload,
    DebianPackage,
    MavenArtifacts,
    Source,
    SourceUnavailable,
)

__all__ = ["ZooKeeper", "ZooKeeperClient", "ZooKeeperFlags"]

ARCHIVE = "https://archive.apache.org/dist/zookeeper"
HEAP = r"^[1-9][0-9]*[kKmMgG]?$"


class ZooKeeperFlags(Options):
    """zoo.cfg settings and JVM options; unset means ZooKeeper's default."""

    tick_time: int | None = Field(None, ge=1, description="tickTime, ms")
    init_limit: int | None = Field(None, ge=1, description="initLimit, ticks")
    sync_limit: int | None = Field(None, ge=1, description="syncLimit, ticks")
    snap_count: int | None = Field(None, ge=1, description="snapCount")
    max_client_cnxns: int | None = Field(None, ge=0, description="maxClientCnxns")
    jute_max_buffer: int | None = Field(None, ge=1, description="-Djute.maxbuffer")
    heap_min: str | None = Field(None, pattern=HEAP, description="-Xms, e.g. 512m")
    heap_max: str | None = Field(None, pattern=HEAP, description="-Xmx, e.g. 4g")

    @model_validator(mode="after")
    def _heap_order(self) -> Self:
        if self.heap_min and self.heap_max and _bytes(self.heap_min) > _bytes(self.heap_max):
            raise ValueError(f"heap_min ({self.heap_min}) exceeds heap_max ({self.heap_max})")
        return self


class ZooKeeperClient(Options):
    session_timeout_ms: int = Field(30000, ge=1000)


class ZooKeeper(DatabaseKind):
    name: ClassVar[str] = "zookeeper"
    client_port: ClassVar[int] = 2181
    flags_model = ZooKeeperFlags
    client_model = ZooKeeperClient

    def install_sources(self, version: str) -> list[Source]:
        base = f"{ARCHIVE}/zookeeper-{version}/apache-zookeeper-{version}-bin.tar.gz"
        return [
            ArchiveDownload(
                url=base,
                checksum_url=f"{base}.sha512",
                algorithm="sha512",
                locate=lambda root: _classpath(root / f"apache-zookeeper-{version}-bin" / "lib"),
            ),
            # Its jar names its dependencies (other Debian packages) in its manifest,
            # so only the installed package works.
            DebianPackage("zookeeper", version, _debian_entry, download_ok=False),
            MavenArtifacts("org.apache.zookeeper", "zookeeper", version),
        ]

    def convert_legacy_flags(self, old: Mapping[str, Any]) -> LegacyFlags:
        renames = {
            "tick_time": "tick_time",
            "init_limit": "init_limit",
            "sync_limit": "sync_limit",
            "snap_count": "snap_count",
            "max_client_connections": "max_client_cnxns",
            "java_d_jute_max_buffer": "jute_max_buffer",
            "java_xms": "heap_min",
            "java_xmx": "heap_max",
        }
        flags: dict[str, Any] = {}
        warnings: list[tuple[str, str]] = []
        for key, value in old.items():
            if key in renames:
                flags[renames[key]] = value
            else:
                warnings.append(
                    (key, f"'{key}' is not a ZooKeeper setting dbtester knows; dropped")
                )
        return flags, warnings


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise SourceUnavailable("no 'java' on PATH (ZooKeeper needs a JRE, e.g. Java 17)")
    return java


def _classpath(lib: Path) -> dict[str, str]:
    jars = sorted(str(p) for p in lib.glob("*.jar"))
    if not jars:
        raise SourceUnavailable(f"no jars under {lib}")
    return {"java": _java(), "classpath": ":".join(jars)}


def _debian_entry(root: Path, dest: Path) -> dict[str, str]:
    return {"java": _java(), "classpath": "/usr/share/java/zookeeper.jar"}


def _bytes(size: str) -> int:
    unit = size[-1].lower()
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(unit, 1)
    digits = size[:-1] if unit in "kmg" else size
    return int(digits) * scale
