"""A Start request checked and resolved before anything runs: its kind, names
and numbers, the binary its kind and version name, its flags and peers.

Pure functions of the request and the agent's config that hand back a
:class:`StartPlan` or raise :class:`StartRefusedError`; the service answers
that with INVALID_ARGUMENT and its message, so no check needs a gRPC context.
"""

from __future__ import annotations

import json
import math
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from dbtester import slowdisk
from dbtester.agent.config import AgentConfig
from dbtester.config.model import HOST_PATTERN, VERSION_PATTERN
from dbtester.databases import KINDS, DatabaseKind
from dbtester.databases.base import MemberSpec, MemberTls, Options, Peer
from dbtester.install import Installed, find_installed, list_installed
from dbtester.proto import agent_pb2 as pb
from dbtester.util.paths import SAFE_NAME

__all__ = [
    "StartPlan",
    "StartRefusedError",
    "check_numbers",
    "installed_version",
    "out_of_range",
    "plan_start",
    "show",
]

CLUSTER_TOKEN = re.compile(r"[A-Za-z0-9._-]{1,300}")
#: a kind's flags are a few keys; anything longer is not flags
MAX_FLAGS_JSON = 64 * 1024
#: a certificate chain or key in PEM is a few KB
MAX_PEM = 64 * 1024
#: bounds on the numbers a request sets (0 means "the agent's default")
SAMPLE_INTERVAL_S = (0.1, 60.0)
HEARTBEAT_TIMEOUT_S = (0.1, 86_400.0)
#: a longer list of a request's peer problems says no more than its first few
MAX_PROBLEMS = 5


class StartRefusedError(Exception):
    """A Start request the agent will not run; the message says why."""


@dataclass(frozen=True)
class StartPlan:
    """What a checked Start request runs: one member of ``kind`` from
    ``installed``, as ``spec`` says, sampled every ``sample_interval`` s;
    ``layer``: the slow-disk layer's program, when the request asks for one."""

    kind: DatabaseKind
    installed: Installed
    spec: MemberSpec
    sample_interval: float
    layer: Installed | None = None


def plan_start(request: pb.StartRequest, config: AgentConfig) -> StartPlan:
    """``request`` checked (in this order, so the first problem is the one
    told) and resolved against ``config``; StartRefusedError when it cannot run."""
    kind = _kind(request.kind)
    _check_names(request)
    check_numbers(request)
    installed = installed_version(kind, request.version, config)
    flags = _flags(kind, request.flags_json)
    peers = _peers(kind, request, flags)
    member_dir = (
        config.data_root
        / "runs"
        / request.run_id
        / request.database_id
        / f"member-{request.member_index}"
    )
    spec = MemberSpec(
        index=request.member_index,
        peers=peers,
        flags=flags,
        member_dir=member_dir,
        data_dir=member_dir / "data",
        cluster_token=request.cluster_token or f"{request.run_id}-{request.database_id}",
        tls=_tls(kind, request),
        auth=request.auth,
    )
    interval = request.sample_interval_s or config.sample_interval_s
    layer = _layer() if request.slow_disk else None
    return StartPlan(kind, installed, spec, interval, layer)


def _layer() -> Installed:
    """The slow-disk layer's program, as ``dbtester install`` or ``agents up``
    put it under ``$DBTESTER_HOME``."""
    found = slowdisk.find()
    if found is None:
        raise StartRefusedError(
            f"the test case's slow_disk needs {slowdisk.BINARY} {slowdisk.VERSION} on this"
            " agent's host, and it is not installed: `dbtester install --for CONFIG` builds it"
            " here, `dbtester agents up CONFIG` copies it to the hosts"
        )
    return found


def _tls(kind: DatabaseKind, request: pb.StartRequest) -> MemberTls | None:
    """The member's TLS identity, when the request gives one: all three PEMs."""
    if not request.HasField("tls"):
        return None
    if not kind.tls:
        raise StartRefusedError(f"kind {kind.name} cannot be started with TLS")
    given = request.tls
    for name in ("ca_pem", "cert_pem", "key_pem"):
        text = getattr(given, name)
        if "-----BEGIN " not in text or len(text) > MAX_PEM:
            raise StartRefusedError(f"tls.{name} is not PEM text (at most {MAX_PEM} bytes)")
    return MemberTls(ca=given.ca_pem, cert=given.cert_pem, key=given.key_pem)


def _kind(name: str) -> DatabaseKind:
    kind = KINDS.get(name)
    if kind is None:
        raise StartRefusedError(f"unknown kind {show(name)}; allowed: {', '.join(KINDS)}")
    return kind


def _check_names(request: pb.StartRequest) -> None:
    """The names that become paths, argv and config text: no path, no newline."""
    for field in ("run_id", "database_id"):
        value = getattr(request, field)
        if not SAFE_NAME.fullmatch(value):
            raise StartRefusedError(
                f"{field} {show(value)} must be letters, digits, . _ - (no paths)"
            )
    if not re.fullmatch(VERSION_PATTERN, request.version):
        raise StartRefusedError(
            f"version {show(request.version)} is not a version (letters, digits, . _ + ~ -)"
        )
    token = request.cluster_token
    if token and not CLUSTER_TOKEN.fullmatch(token):
        raise StartRefusedError(f"cluster_token {show(token)} must be 1-300 letters, digits, . _ -")


def check_numbers(request: pb.StartRequest) -> None:
    """The request's seconds: a sampler that spins or a watchdog that never
    fires is no default either."""
    for field, (low, high) in (
        ("sample_interval_s", SAMPLE_INTERVAL_S),
        ("heartbeat_timeout_s", HEARTBEAT_TIMEOUT_S),
    ):
        problem = out_of_range(field, getattr(request, field), low, high)
        if problem:
            raise StartRefusedError(problem)


def installed_version(kind: DatabaseKind, version: str, config: AgentConfig) -> Installed:
    """The files to run: the config's allow-list first, then what ``dbtester
    install`` put under ``$DBTESTER_HOME``."""
    allowed = config.binaries.get(kind.name, {})
    if version in allowed:
        entry = allowed[version]
        return Installed(
            kind.name,
            version,
            Path(next(iter(entry.values()))).parent,
            "agent config allow-list",
            entry,
            "",
        )
    found = find_installed(kind.name, version)
    if found is not None:
        return found
    have = sorted({*allowed, *(i.version for i in list_installed() if i.kind == kind.name)})
    listed = ", ".join(have) if have else "none"
    raise StartRefusedError(
        f"{kind.name} {version} is not installed on {socket.gethostname()}; versions"
        f" this agent can run: {listed} (add one with: dbtester install"
        f" {kind.name}@{version})"
    )


def _flags(kind: DatabaseKind, text: str) -> Options:
    if len(text) > MAX_FLAGS_JSON:
        raise StartRefusedError(
            f"bad {kind.name} flags: {len(text):,} characters of JSON is not flags"
        )
    try:
        return kind.flags_model.model_validate(json.loads(text or "{}"))
    except RecursionError:
        raise StartRefusedError(f"bad {kind.name} flags: nested too deeply") from None
    except (ValueError, ValidationError) as exc:
        raise StartRefusedError(f"bad {kind.name} flags: {str(exc)[:500]}") from None


def _peers(kind: DatabaseKind, request: pb.StartRequest, flags: Options) -> tuple[Peer, ...]:
    """The request's peers, every one an address with the ports the kind's
    members with ``flags`` have; the refusal names the first few problems."""
    peers = tuple(Peer(p.name, p.host, dict(p.ports)) for p in request.peers)
    problems = []
    if request.member_index >= len(peers):
        problems.append(f"member_index {request.member_index} but {len(peers)} peers")
    if len({p.name for p in peers}) != len(peers):
        problems.append("peer names must be unique")
    for peer in peers:
        # Hosts reach config files (zoo.cfg) and flags: an address, nothing else.
        if not re.fullmatch(HOST_PATTERN, peer.host) or len(peer.host) > 255:
            problems.append(f"peer {show(peer.name)} host {show(peer.host)} is not an address")
        bad = [p for p in peer.ports.values() if not 1 <= p <= 65535]
        if bad:
            problems.append(f"peer {show(peer.name)} has ports out of range: {bad[:5]}")
        missing = set(kind.ports(flags)) - set(peer.ports)
        if missing:
            problems.append(f"peer {show(peer.name)} lacks ports {sorted(missing)}")
        if not SAFE_NAME.fullmatch(peer.name):
            problems.append(f"peer name {show(peer.name)} must be letters, digits, . _ -")
    if problems:
        more = f"; and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
        raise StartRefusedError("; ".join(problems[:MAX_PROBLEMS]) + more)
    return peers


def show(value: str, limit: int = 80) -> str:
    """A name from a request, quoted and cut short, for an error message."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")


def out_of_range(field: str, value: float, low: float, high: float) -> str | None:
    """Why ``value`` (0: the agent's default) is not a number of seconds in [low, high]."""
    if value == 0 or (math.isfinite(value) and low <= value <= high):
        return None
    return f"{field} {value!r} must be 0 (the default) or from {low:g} to {high:g} seconds"
