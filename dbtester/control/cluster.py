"""The first and last phases of a database's run: its agents reached, its
members started and serving (:class:`Cluster`), heartbeats while it runs,
and at the end every member stopped and its files fetched (:class:`Stopped`).

Each phase takes what the previous one returned; none keeps state between
calls. The heartbeat thread reports into a :class:`Health` of its own.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from dbtester.agent.client import AgentClient, ClockOffset
from dbtester.config.model import Host
from dbtester.control.access import MembersAccess
from dbtester.control.agents import EmbeddedAgents, remote_tls, remote_token
from dbtester.control.job import DatabaseJob
from dbtester.databases.base import PLAIN, Access, Peer
from dbtester.errors import AgentError
from dbtester.proto import agent_pb2 as pb
from dbtester.results import Environment, MemberRecord
from dbtester.util.net import free_port, is_loopback, join_host_port
from dbtester.util.progress import Reporter

__all__ = [
    "AGENT_WATCHDOG_S",
    "HEARTBEAT_S",
    "MISSED_BEATS",
    "READY_TIMEOUT_S",
    "Agents",
    "Cluster",
    "Health",
    "Started",
    "Stopped",
    "clock_offset",
    "connect",
    "diagnose",
    "heartbeats",
    "remote_client",
    "start",
    "stop",
    "wait_serving",
    "warn_plain_token",
]

HEARTBEAT_S = 1.0
MISSED_BEATS = 3  # an agent silent this many intervals fails the database
# An agent that hears nothing for this long stops its databases (a controller
# killed outright, a partitioned network); 10 missed heartbeats.
AGENT_WATCHDOG_S = 10.0
READY_TIMEOUT_S = 120.0

T = TypeVar("T")


class Health:
    """The first problem the heartbeats found ("" while all is well); written by
    the heartbeat thread, read by the load's health check and the run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._problem = ""

    def report(self, problem: str) -> None:
        with self._lock:
            self._problem = self._problem or problem

    @property
    def problem(self) -> str:
        with self._lock:
            return self._problem


@dataclass(frozen=True)
class Agents:
    """The agents that run the members: member *i* runs on ``clients[i]``
    as ``peers[i]``; ``members`` hold the clock offsets of those that
    answered, in order, up to the first that did not (``failure``; None:
    every one answered)."""

    clients: tuple[AgentClient, ...]
    peers: tuple[Peer, ...]
    members: tuple[MemberRecord, ...]
    failure: AgentError | None = None


@dataclass(frozen=True)
class Started:
    """The members' start: each one's record (with its pid and machine when
    it started) and the first failure in member order (None: all started)."""

    members: tuple[MemberRecord, ...]
    failure: AgentError | None


@dataclass(frozen=True)
class Cluster:
    """A database the load can reach at ``endpoints``: its members started
    by ``clients`` (none for a test case's own ``endpoints``)."""

    endpoints: tuple[str, ...]
    members: tuple[MemberRecord, ...] = ()
    peers: tuple[Peer, ...] = ()
    clients: tuple[AgentClient, ...] = ()
    health: Health = field(default_factory=Health)
    #: how dbtester's clients reach the members (TLS, a user)
    access: Access = PLAIN


@dataclass(frozen=True)
class Stopped:
    """Every member stopped and its files fetched: the members' final
    records, and the first problem stopping or fetching ("" none)."""

    members: tuple[MemberRecord, ...]
    problem: str = ""


def connect(job: DatabaseJob, stack: ExitStack) -> Agents:
    """The agents of ``job``'s members, ready, their clocks measured; embedded
    ones started here and stopped, like every client closed, with ``stack``.
    An agent that does not answer is returned as the failure, with the
    members of those before it: the record keeps what was measured."""
    kind, db = job.kind, job.db
    if db.embedded:
        kind.install(db.version, job.reporter)  # instant when installed
        embedded = stack.enter_context(
            EmbeddedAgents(
                job.scratch / db.id, db.member_count, heartbeat_timeout_s=AGENT_WATCHDOG_S
            )
        )
        clients = embedded.clients()
        peers = [
            Peer(f"m{i}", "127.0.0.1", {n: free_port() for n in kind.ports(db.flags)})
            for i in range(db.member_count)
        ]
    else:
        if any(not is_loopback(h.address) for h in db.hosts):
            warn_plain_token(job.reporter)
        clients = [remote_client(h) for h in db.hosts]
        ports = kind.ports(db.flags)
        peers = [Peer(f"m{i}", h.address, dict(ports)) for i, h in enumerate(db.hosts)]
    for client in clients:
        stack.callback(client.close)
    members: list[MemberRecord] = []
    for i, client in enumerate(clients):
        try:
            client.wait_ready(timeout=30.0)
            offset = clock_offset(client)
        except AgentError as exc:
            return Agents(tuple(clients), tuple(peers), tuple(members), exc)
        members.append(
            MemberRecord(
                index=i,
                host=peers[i].host,
                agent=client.address,
                clock_offset_s=offset.offset_s,
                clock_rtt_s=offset.round_trip_s,
            )
        )
    return Agents(tuple(clients), tuple(peers), tuple(members))


def start(job: DatabaseJob, agents: Agents, tls: MembersAccess | None = None) -> Started:
    """Every member started at once (each start waits 0.5 s to see the member
    did not exit at once, so a trial's setup does not grow with the member
    count), each with its TLS identity from ``tls`` when it has one; a
    failure is returned, not raised, once every start has returned, so that
    the stop reaches the members that did start."""
    identities = tls or MembersAccess()
    db, peers = job.db, list(agents.peers)
    flags = db.flags.model_dump(exclude_none=True)
    job.say(f"starting {len(peers)} {db.kind} {db.version} member(s)")

    def start_member(i: int, client: AgentClient) -> pb.StartResponse:
        return client.start(
            run_id=job.agent_run_id,
            database_id=db.id,
            kind=db.kind,
            version=db.version,
            member_index=i,
            peers=peers,
            flags=flags,
            heartbeat_timeout_s=AGENT_WATCHDOG_S,
            cluster_token=f"{job.agent_run_id}-{db.id}",
            slow_disk=any(fault.action == "slow_disk" for fault in job.faults),
            tls=identities.identity(i),
            auth=db.auth is not None,
        )

    clients = agents.clients
    if job.kind.first_serves_first(db.flags) and len(clients) > 1:
        replies = _on_each(clients[:1], start_member)
        if not isinstance(replies[0], AgentError):
            _await_first(job, peers[0], replace(identities.access, user="", secret=""))
        replies += _on_each(clients[1:], lambda i, client: start_member(i + 1, client))
    else:
        replies = _on_each(clients, start_member)
    members = tuple(
        member
        if isinstance(reply, AgentError)
        else member.model_copy(
            update={
                "pid": reply.pid,
                "machine": _machine(reply),
                "binary_sha256": reply.binary_sha256,
            }
        )
        for member, reply in zip(agents.members, replies, strict=True)
    )
    failure = next((r for r in replies if isinstance(r, AgentError)), None)
    return Started(members, failure)


def _await_first(job: DatabaseJob, first: Peer, access: Access) -> None:
    """Until member 0 serves, or READY_TIMEOUT_S has passed (wait_serving
    then says which members do not serve)."""
    job.say(f"waiting for member 0 to serve before starting the others ({job.db.kind})")
    _not_serving(job, [first], access)


def wait_serving(job: DatabaseJob, cluster: Cluster) -> None:
    """Returns once every member serves; DbtesterError when one exited or
    some still do not after READY_TIMEOUT_S."""
    waiting = _not_serving(
        job, cluster.peers, cluster.access, each_round=lambda: _check_members(job, cluster.clients)
    )
    if waiting:
        names = ", ".join(p.name for p in waiting)
        raise job.failed(
            f"members {names} not serving after {READY_TIMEOUT_S:.0f} s (see server-*-database.log)"
        )


def _not_serving(
    job: DatabaseJob,
    peers: Sequence[Peer],
    access: Access,
    each_round: Callable[[], None] = lambda: None,
) -> list[Peer]:
    """Asks ``peers`` until every one serves or READY_TIMEOUT_S has passed,
    calling ``each_round`` between rounds (it may raise); those that do not."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = list(peers)
    while waiting:
        waiting = [p for p in waiting if not job.kind.serving(p, access=access)]
        if not waiting:
            break
        each_round()
        if time.monotonic() > deadline:
            break
        time.sleep(0.25)
    return waiting


def _mine(job: DatabaseJob, member: Any) -> bool:
    """A member of this run and database (an agent may hold older ones)."""
    return bool((member.run_id, member.database_id) == job.member_ref)


def running_members(job: DatabaseJob, cluster: Cluster) -> int | None:
    """How many of the database's members their agents say run and are
    reachable (not paused, exited or isolated); an agent that does not answer
    counts its member out. None: no agents (the test case's own endpoints)."""
    running = 0
    for i, client in enumerate(cluster.clients):
        try:
            members = client.status(timeout=2.0).members
        except AgentError:
            continue
        running += any(
            _mine(job, m) and m.member_index == i and m.state == "running" and not m.isolated
            for m in members
        )
    return running if cluster.clients else None


def _check_members(job: DatabaseJob, clients: Sequence[AgentClient]) -> None:
    for i, client in enumerate(clients):
        for member in client.status(timeout=5.0).members:
            if _mine(job, member) and member.state == "exited":
                raise job.failed(f"member {i} on {client.address} {member.error}")


@contextmanager
def heartbeats(job: DatabaseJob, clients: Sequence[AgentClient], health: Health) -> Iterator[None]:
    """Status calls every second keep the agents' watchdogs quiet and tell
    ``health`` within MISSED_BEATS seconds when an agent or a member is gone."""
    stop_beating = threading.Event()
    last_ok = [time.monotonic()] * len(clients)

    def beat() -> None:
        while not stop_beating.wait(HEARTBEAT_S):
            for i, client in enumerate(clients):
                try:
                    reply = client.status(timeout=HEARTBEAT_S)
                except AgentError:
                    if time.monotonic() - last_ok[i] > MISSED_BEATS * HEARTBEAT_S:
                        health.report(f"agent {client.address} stopped answering (member {i})")
                    continue
                last_ok[i] = time.monotonic()
                for member in reply.members:
                    if _mine(job, member) and member.state == "exited":
                        health.report(f"member {i} on {client.address} {member.error}")

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop_beating.set()
        thread.join()


def diagnose(job: DatabaseJob, cluster: Cluster) -> str:
    """Why the load may have failed: agents that do not answer, members that
    exited (asked once, right away, rather than waiting for heartbeats)."""
    problems = []
    for i, client in enumerate(cluster.clients):
        try:
            reply = client.status(timeout=2.0)
        except AgentError as exc:
            problems.append(
                f"agent {client.address} (member {i}) is not answering: {exc.status or exc}"
            )
            continue
        problems += [
            f"member {i} on {client.address} {m.error}"
            for m in reply.members
            if _mine(job, m) and m.state == "exited"
        ]
    return "; ".join(problems)


def stop(job: DatabaseJob, cluster: Cluster, *, failed: bool) -> Stopped:
    """Every member stopped, one at a time, and its files fetched; a
    ``failed`` database's data is archived on its agents."""
    failed = failed or bool(cluster.health.problem)
    members, problem = list(cluster.members), ""
    for i, client in enumerate(cluster.clients):
        # One at a time: a member stopped while the others stop too can take
        # far longer (etcd: 7 s instead of ~1 s when all three got SIGTERM
        # together, each waiting for peers that were going away).
        try:
            reply = client.stop(job.agent_run_id, job.db.id, i, failed=failed)
        except AgentError as exc:
            problem = problem or str(exc)
            continue
        members[i] = members[i].model_copy(
            update={
                "disk_usage_bytes": reply.disk_usage_bytes,
                "stop_seconds": reply.stop_seconds,
                "killed": reply.killed,
                "exit_code": reply.exit_code,
                "samples": reply.samples,
                "archived_to": reply.archived_to,
            }
        )
        early = _stopped_early(job, i, client, reply, failed)
        fetched = _fetch(job, client, i)  # whatever happened: the files tell why
        problem = problem or early or fetched
    return Stopped(tuple(members), problem)


def _stopped_early(
    job: DatabaseJob, index: int, client: AgentClient, reply: pb.StopResponse, failed: bool
) -> str:
    """Why the member was no longer running when asked to stop ("": it was)."""
    if reply.stopped_by:
        # Its agent stopped it before we asked (its watchdog, when our
        # calls stopped reaching it): not a death of the member's own.
        return (
            f"{job.db.id}: member {index} on {client.address} was stopped by"
            f" {reply.stopped_by}, before the controller's stop; its data"
            f" is kept at {reply.archived_to}"
        )
    if reply.archived_to and not failed:
        # The agent archives a member that died on its own, even late.
        return (
            f"{job.db.id}: member {index} on {client.address}"
            f" had exited before the stop (exit code"
            f" {reply.exit_code}); its data is kept at"
            f" {reply.archived_to}"
        )
    return ""


#: a companion server's files: <name>.log, <name>-metrics.csv
_COMPANION_FILE = re.compile(r"([a-z][a-z0-9_]{0,31})(-metrics\.csv|\.log)")


def _fetch(job: DatabaseJob, client: AgentClient, index: int) -> str:
    """The member's files into the results; the first that failed, said ("")."""
    out = job.out
    targets = {
        "metrics.csv": out.server_metrics(index),
        "database.log": out.server_log(index),
        "agent.log": out.agent_log(index),
    }
    problem = ""
    try:
        targets |= _companion_files(job, client, index, known=set(targets))
    except AgentError as exc:
        problem = f"listing the files on {client.address}: {exc}"
    for name, target in targets.items():
        try:
            client.fetch(job.agent_run_id, job.db.id, index, name, target)
        except AgentError as exc:
            problem = problem or f"fetching {name} from {client.address}: {exc}"
    return problem


def _companion_files(
    job: DatabaseJob, client: AgentClient, index: int, known: set[str]
) -> dict[str, Path]:
    """The member's companion server's files (kine's PostgreSQL), as the
    agent lists them: <name>-metrics.csv and <name>.log, apart from the
    member's own (``known``)."""
    found = {}
    for name in client.list_files(job.agent_run_id, job.db.id, index):
        match = _COMPANION_FILE.fullmatch(name)
        if match is None or name in known:
            continue
        if match[2] == ".log":
            found[name] = job.out.companion_log(index, match[1])
        else:
            found[name] = job.out.companion_metrics(index, match[1])
    return found


def remote_client(host: Host) -> AgentClient:
    """A client of the agent on ``host``, with the remote token and TLS."""
    tls = remote_tls()
    return AgentClient(
        join_host_port(host.address, host.agent_port),
        remote_token(),
        tls_ca=tls.get("tls_ca"),
        tls_cert=tls.get("tls_cert"),
        tls_key=tls.get("tls_key"),
    )


def warn_plain_token(reporter: Reporter) -> None:
    if remote_token() and not remote_tls():
        reporter.say(
            "warning: sending the agent token without TLS; set $DBTESTER_AGENT_TLS_CA to encrypt it"
        )


def clock_offset(client: AgentClient) -> ClockOffset:
    """The agent's clock offset, from the fastest of five round trips."""
    return min((client.clock_offset() for _ in range(5)), key=lambda o: o.round_trip_s)


def _on_each(
    clients: Sequence[AgentClient], call: Callable[[int, AgentClient], T]
) -> list[T | AgentError]:
    """``call(i, client)`` for every agent at once, in member order: the reply,
    or the AgentError it raised."""
    with ThreadPoolExecutor(max_workers=max(1, len(clients))) as pool:
        return list(pool.map(lambda ic: _caught(call, *ic), enumerate(clients)))


def _caught(
    call: Callable[[int, AgentClient], T], index: int, client: AgentClient
) -> T | AgentError:
    try:
        return call(index, client)
    except AgentError as exc:
        return exc


def _machine(reply: pb.StartResponse) -> Environment | None:
    """The member's host as its agent described it (None from an agent that
    predates the description)."""
    if not reply.HasField("host"):
        return None
    host = reply.host
    return Environment(
        hostname=host.hostname,
        kernel=host.kernel,
        cpu_model=host.cpu_model,
        cores=host.cores or None,
        memory_gib=host.memory_gib or None,
    )
