"""HashiCorp Consul (server mode, KV API): flags and how to install a version."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from dbtester.databases import consul_events
from dbtester.databases.base import (
    KUBERNETES_NEEDS,
    PLAIN,
    Access,
    AuthKeys,
    DatabaseKind,
    EventCall,
    LaunchPlan,
    LoadSettings,
    MemberSpec,
    Options,
    Peer,
    TokenAuth,
    go_arch,
    reported_version,
)
from dbtester.databases.consul_client import bootstrap_acl, open_url
from dbtester.errors import DbtesterError
from dbtester.install import (
    ArchiveDownload,
    GoBuild,
    Installed,
    Source,
    SourceUnavailable,
    go_proxy_versions,
)
from dbtester.util.keys import PREFIX

__all__ = ["Consul", "ConsulClient", "ConsulFlags"]

RELEASES = "https://releases.hashicorp.com/consul"


class ConsulFlags(Options):
    """Consul agent settings; unset means Consul's default."""

    raft_multiplier: int | None = Field(
        None, ge=1, le=10, description="performance.raft_multiplier"
    )
    log_level: str | None = Field(
        None, pattern="^(trace|debug|info|warn|error)$", description="log_level"
    )
    session_ttl_min_s: int | None = Field(
        None,
        ge=1,
        le=86_400,
        description="session_ttl_min in seconds: the shortest session TTL the servers"
        " accept (Consul's default 10)",
    )


class ConsulClient(Options):
    """The load uses Consul's HTTP API; a lock load's sessions take the lock-delay."""

    lock_delay_s: float = Field(
        15.0,
        ge=0,
        le=60,
        description="A lock load's sessions' LockDelay: how long Consul refuses a lock whose"
        " holder's session was invalidated (Consul's default 15 s; at most 60)",
    )


class Consul(DatabaseKind):
    name: ClassVar[str] = "consul"
    # client = the HTTP API (KV); server = Raft RPC; serf gossip on LAN and WAN
    default_ports: ClassVar[Mapping[str, int]] = {
        "client": 8500,
        "server": 8300,
        "serf_lan": 8301,
        "serf_wan": 8302,
    }
    flags_model = ConsulFlags
    client_model = ConsulClient
    protocol: ClassVar[str] = "consul"
    cannot: ClassVar[Mapping[str, str]] = {"kubernetes": KUBERNETES_NEEDS}

    def session_note(self, client: Options) -> str | None:
        assert isinstance(client, ConsulClient)
        if not client.lock_delay_s:
            return None
        return (
            f"a lock whose holder's session was invalidated (its TTL ran out, up to twice"
            f" over; not a release) stays refused for the lock-delay, {client.lock_delay_s:g} s"
            " (client: {lock_delay_s: 0} turns it off)"
        )

    def session_ttl_bounds(self, flags: Options) -> tuple[int, int] | None:
        """A session's TTL must lie between session_ttl_min (10 s by
        default) and a day."""
        assert isinstance(flags, ConsulFlags)
        return flags.session_ttl_min_s or 10, 86_400

    watches: ClassVar[bool] = True
    watch_note: ClassVar[str] = (
        "each watcher is a blocking query on the keys' prefix holding a connection of"
        " its own (one long poll per HTTP/1.1 connection; watch_connections does not"
        " apply); puts that land between two replies arrive in one reply and are"
        " counted as WATCH-EVENTS-COALESCED, each timed at that reply's arrival, and"
        " every reply lists all keys under the prefix, so its cost grows with them"
    )
    events: ClassVar[frozenset[str]] = frozenset({"snapshot", "transfer_leader", "upgrade"})
    tls: ClassVar[bool] = True
    auth_model: ClassVar[type[AuthKeys] | None] = TokenAuth
    event_notes: ClassVar[Mapping[str, str]] = consul_events.NOTES

    def run_event(self, event: str, call: EventCall) -> str:
        return consul_events.run(event, call)

    def prefill(
        self, settings: LoadSettings, count: int, value_size: int, advance: Callable[[int], None]
    ) -> None:
        consul_events.prefill(settings, ROOT, count, value_size, advance)

    def load_note(self, clients: int, connections: int) -> str | None:
        if clients <= connections:
            return None
        return (
            f"HTTP/1.1 carries one request at a time per connection: {clients:,} clients"
            f" took turns on {connections:,} connections, first come, first served, and"
            " each wait counts in latency"
        )

    def launch(self, installed: Installed, member: MemberSpec) -> LaunchPlan:
        flags = member.flags
        assert isinstance(flags, ConsulFlags)
        me = member.me
        config: dict[str, Any] = {
            "server": True,
            "bootstrap_expect": len(member.peers),
            "node_name": me.name,
            "datacenter": "dbtester",
            "data_dir": str(member.data_dir),
            "bind_addr": me.host,
            "client_addr": me.host,
            "advertise_addr": me.host,
            "ports": {
                "http": me.ports["client"],
                "server": me.ports["server"],
                "serf_lan": me.ports["serf_lan"],
                "serf_wan": me.ports["serf_wan"],
                "dns": -1,
                "grpc": -1,
                "grpc_tls": -1,
                "https": -1,
            },
            "retry_join": [p.address("serf_lan") for p in member.peers if p is not me],
            # Several servers on one machine must not derive the same node id.
            "disable_host_node_id": True,
            "disable_update_check": True,
            "leave_on_terminate": False,
            "log_level": (flags.log_level or "info").upper(),
            "ui_config": {"enabled": False},
        }
        if flags.raft_multiplier:
            config["performance"] = {"raft_multiplier": flags.raft_multiplier}
        if flags.session_ttl_min_s:
            config["session_ttl_min"] = f"{flags.session_ttl_min_s}s"
        files: dict[Path, str] = {}
        if member.tls is not None:
            config["ports"] |= {"http": -1, "https": me.ports["client"]}
            config["tls"] = _tls_config(member.tls_dir)
            files = member.tls.files(member.tls_dir)
        if member.auth:
            # Denied unless a token allows it; the token is the bootstrap's.
            config["acl"] = {
                "enabled": True,
                "default_policy": "deny",
                "enable_token_persistence": True,
            }
        path = member.member_dir / "consul.json"
        argv = [str(installed.path("consul")), "agent", f"-config-file={path}"]
        return LaunchPlan(argv, {path: json.dumps(config, indent=2) + "\n", **files})

    def count_keys(self, settings: LoadSettings, prefix: bytes = PREFIX) -> int:
        self._only_load_keys(prefix)
        # the load's keys only ("k" and a number), not the checked clients'
        path = f"/v1/kv/{ROOT}/{PREFIX.decode()}?keys"
        timeout = max(settings.timeout_s, 120)
        try:
            with open_url(settings.endpoints[0], path, settings.access, timeout) as reply:
                return len(json.loads(reply.read()))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # Consul's way of saying "no such keys"
                return 0
            if exc.code in (401, 403):
                raise PermissionError(f"Consul refused the key count: HTTP {exc.code}") from None
            raise

    def serving(self, peer: Peer, timeout: float = 1.0, access: Access = PLAIN) -> bool:
        """/v1/status/leader names the leader once the cluster elected one."""
        return bool(_leader_address(peer, timeout, access))

    def leader(
        self, peers: Sequence[Peer], timeout: float = 2.0, access: Access = PLAIN
    ) -> int | None:
        """/v1/status/leader names the leader's server (RPC) address, host:port;
        any member that answers knows it."""
        for peer in peers:
            address = _leader_address(peer, timeout, access)
            if address is None:
                continue
            host, _, port = address.rpartition(":")
            for index, candidate in enumerate(peers):
                if candidate.host == host and str(candidate.ports.get("server")) == port:
                    return index
            return None
        return None

    def create_user(self, peers: Sequence[Peer], access: Access) -> None:
        """The ACL bootstrap, its management token the test case's, which
        each member then uses as its own agent token (so that it may
        register itself in the catalog)."""
        try:
            uuid.UUID(access.secret)
        except ValueError:
            raise DbtesterError(
                "Consul's tokens are UUIDs (for example from `uuidgen`): the auth token"
                " given is not one"
            ) from None
        try:
            bootstrap_acl([p.address("client") for p in peers], access, timeout=30.0)
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace").strip()
            raise DbtesterError(f"Consul's ACL set-up: HTTP {exc.code} {body}") from None
        except OSError as exc:
            raise DbtesterError(f"Consul's ACL set-up: {exc}") from None

    def engine_auth(self, access: Access) -> dict[str, str]:
        return {"token": access.secret}

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

    def released_versions(self) -> list[str]:
        # HashiCorp's release index first (the archives install from it); where
        # that cannot be reached, the module proxy, which the Go build uses.
        try:
            with urllib.request.urlopen(f"{RELEASES}/index.json", timeout=5.0) as response:
                index = json.loads(response.read())
            return [str(v) for v in index.get("versions", {})]
        except (OSError, ValueError):
            return go_proxy_versions("github.com/hashicorp/consul")

    def verify_install(self, entry: Mapping[str, str], version: str) -> None:
        have = reported_version([entry["consul"], "version"], r"Consul v(\S+)")
        if have != version:
            raise SourceUnavailable(f"the binary reports Consul {have}, not {version}")


ROOT = "dbtester"


def _leader_address(peer: Peer, timeout: float, access: Access) -> str | None:
    """The leader's server address as ``peer`` names it ("" while none
    leads); None when it does not answer."""
    try:
        with open_url(peer.address("client"), "/v1/status/leader", access, timeout) as reply:
            return str(json.loads(reply.read()) or "")
    except (OSError, ValueError):
        return None


def _tls_config(folder: Path) -> dict[str, Any]:
    """HTTPS and the servers' RPC over TLS, each side asking the other for a
    certificate the run's CA signed (mutual TLS). The certificates name
    hosts, not Consul's server.<datacenter> names, so server names are not
    checked beyond the CA."""
    files = {
        "ca_file": str(folder / "ca.pem"),
        "cert_file": str(folder / "cert.pem"),
        "key_file": str(folder / "key.pem"),
    }
    return {
        "defaults": {**files, "verify_incoming": True, "verify_outgoing": True},
        "internal_rpc": {"verify_server_hostname": False},
    }
