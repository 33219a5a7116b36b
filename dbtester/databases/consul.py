"""HashiCorp Consul (server mode, KV API): flags and how to install a version."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from dbtester.databases.base import DatabaseKind, Options, go_arch, reported_version
from dbtester.install import ArchiveDownload, GoBuild, Source, SourceUnavailable

__all__ = ["Consul", "ConsulClient", "ConsulFlags"]

RELEASES = "https://releases.hashicorp.com/consul"


class ConsulFlags(Options):
    """Consul agent settings; unset means Consul's default."""

    raft_multiplier: int | None = Field(
        None, ge=1, le=10, description="performance.raft_multiplier"
    )
    log_level: str | None = Field(None, pattern="^(trace|debug|info|warn|error)$")


class ConsulClient(Options):
    pass


class Consul(DatabaseKind):
    name: ClassVar[str] = "consul"
    client_port: ClassVar[int] = 8500
    flags_model = ConsulFlags
    client_model = ConsulClient

    def install_sources(self, version: str) -> list[Source]:
        name = f"consul_{version}_linux_{go_arch()}.zip"
        return [
            ArchiveDownload(
                url=f"{RELEASES}/{version}/{name}",
                checksum_url=f"{RELEASES}/{version}/consul_{version}_SHA256SUMS",
                locate=lambda root: {"consul": str(root / "consul")},
            ),
            GoBuild(
                module="github.com/hashicorp/consul",
                version=f"v{version}",
                package="github.com/hashicorp/consul",
                binary="consul",
                # The checksum database does not list Consul's module; the proxy serves it.
                env={"GONOSUMDB": "github.com/hashicorp/consul"},
                expected_minutes=3,
            ),
        ]

    def verify_install(self, entry: Mapping[str, str], version: str) -> None:
        have = reported_version([entry["consul"], "version"], r"Consul v(\S+)")
        if have != version:
            raise SourceUnavailable(f"the binary reports Consul {have}, not {version}")
