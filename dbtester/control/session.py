"""One database of a test case, start to finish: agents, members, readiness,
seeding, load, verification, stop, files — written to ``DIR/<db-id>/``.

Whatever happens (a failure, Ctrl-C), every member that was started is
stopped and its files are fetched; a failed database is archived on its agents.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dbtester.agent.client import AgentClient, AgentError
from dbtester.config.model import DatabaseSpec
from dbtester.control.agents import EmbeddedAgents, remote_tls, remote_token
from dbtester.databases import get_kind
from dbtester.databases.base import DatabaseKind, LoadSettings, Peer
from dbtester.errors import DbtesterError
from dbtester.install import Reporter
from dbtester.load.keys import KeySpace
from dbtester.load.runner import LoadResult, run_load

__all__ = ["RUN_FILE", "RUN_SCHEMA", "DatabaseRun", "MemberRecord", "Verification"]

RUN_FILE = "run.json"
RUN_SCHEMA = 1
HEARTBEAT_S = 1.0
MISSED_BEATS = 3  # an agent silent this many intervals fails the database
# An agent that hears nothing for this long stops its databases (a controller
# killed outright, a partitioned network); 10 missed heartbeats.
AGENT_WATCHDOG_S = 10.0
READY_TIMEOUT_S = 120.0
# Failures that mean the write was refused, never applied; every other failure
# (timeouts, UNAVAILABLE, a dropped connection) leaves its outcome unknown.
KNOWN_REFUSALS = {
    "INVALID_ARGUMENT",
    "FAILED_PRECONDITION",
    "RESOURCE_EXHAUSTED",
    "PERMISSION_DENIED",
    "UNAUTHENTICATED",
    "UNIMPLEMENTED",
    "wrong-value",
}


@dataclass
class MemberRecord:
    index: int
    host: str
    agent: str
    clock_offset_s: float = 0.0
    clock_rtt_s: float = 0.0
    pid: int = 0
    disk_usage_bytes: int = 0
    stop_seconds: float = 0.0
    killed: bool = False
    exit_code: int = 0
    samples: int = 0
    archived_to: str = ""


@dataclass
class Verification:
    attempted: int
    acknowledged: int
    failed: int
    unknown: int
    expected_min: int
    expected_max: int
    found: int
    lost: int
    unexpected: int

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.unexpected == 0


@dataclass
class DatabaseRun:
    db: DatabaseSpec
    run_id: str
    out: Path
    scratch: Path
    workers: int | None = None
    reporter: Reporter = field(default_factory=Reporter)
    members: list[MemberRecord] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    error: str = ""
    verification: Verification | None = None
    load: LoadResult | None = None
    started_unix: float = 0.0
    _clients: list[AgentClient] = field(default_factory=list)
    _health_problem: str = ""
    _count_problem: str = ""

    @property
    def kind(self) -> DatabaseKind:
        return get_kind(self.db.kind)

    # ------------------------------------------------------------------ the run

    def run(self) -> bool:
        """Run this database; True when it passed. The record is always written."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.started_unix = time.time()
        try:
            with self._cluster():
                self._seed_if_read()
                try:
                    self._load()
                except DbtesterError:
                    # Account for every write even when the load stopped early:
                    # what was lost matters most when something went wrong.
                    self._account()
                    raise
                self._account()
                self._verify()
        except DbtesterError as exc:
            self.error = str(exc)
        except KeyboardInterrupt:
            self.error = "interrupted (Ctrl-C)"
            raise
        finally:
            self._write_record()
        return not self.error

    @contextmanager
    def _cluster(self) -> Iterator[None]:
        if self.db.endpoints:
            self.endpoints = list(self.db.endpoints)
            yield
            return
        with ExitStack() as stack:
            peers = self._agents(stack)
            # Heartbeats cover the stop too: stopping and fetching member by member
            # must not let a later member's agent watchdog fire.
            with self._heartbeats():
                failed = False
                try:
                    self._start_members(peers)
                    self._wait_serving(peers)
                    yield
                except BaseException:
                    failed = True  # the agents archive a failed database's data
                    raise
                finally:
                    self._stop_members(failed)

    def _agents(self, stack: ExitStack) -> list[Peer]:
        kind = self.kind
        count = self.db.member_count
        if self.db.embedded:
            kind.install(self.db.version, self.reporter)  # instant when installed
            embedded = stack.enter_context(
                EmbeddedAgents(
                    self.scratch / self.db.id, count, heartbeat_timeout_s=AGENT_WATCHDOG_S
                )
            )
            self._clients = embedded.clients()
            peers = [
                Peer(f"m{i}", "127.0.0.1", {n: _free_port() for n in kind.default_ports})
                for i in range(count)
            ]
        else:
            token = remote_token()
            tls = remote_tls()
            if token and not tls and any(not _loopback(h.address) for h in self.db.hosts):
                self.reporter.say(
                    "warning: sending the agent token without TLS; set"
                    " $DBTESTER_AGENT_TLS_CA to encrypt it"
                )
            self._clients = [
                AgentClient(
                    _join(h.address, h.agent_port),
                    token,
                    tls_ca=tls.get("tls_ca"),
                    tls_cert=tls.get("tls_cert"),
                    tls_key=tls.get("tls_key"),
                )
                for h in self.db.hosts
            ]
            peers = [
                Peer(f"m{i}", h.address, dict(kind.default_ports))
                for i, h in enumerate(self.db.hosts)
            ]
        for client in self._clients:
            stack.callback(client.close)
        for i, client in enumerate(self._clients):
            client.wait_ready(timeout=30.0)
            offset = min((client.clock_offset() for _ in range(5)), key=lambda o: o.round_trip_s)
            self.members.append(
                MemberRecord(i, peers[i].host, client.address, offset.offset_s, offset.round_trip_s)
            )
        return peers

    def _start_members(self, peers: list[Peer]) -> None:
        flags = self.db.flags.model_dump(exclude_none=True)
        self.reporter.say(
            f"{self.db.id}: starting {len(peers)} {self.db.kind} {self.db.version} member(s)"
        )
        for i, client in enumerate(self._clients):
            reply = client.start(
                run_id=self.run_id,
                database_id=self.db.id,
                kind=self.db.kind,
                version=self.db.version,
                member_index=i,
                peers=peers,
                flags=flags,
                heartbeat_timeout_s=AGENT_WATCHDOG_S,
                cluster_token=f"{self.run_id}-{self.db.id}",
            )
            self.members[i].pid = reply.pid
        self.endpoints = [p.address("client") for p in peers]

    def _wait_serving(self, peers: list[Peer]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = list(peers)
        while waiting:
            waiting = [p for p in waiting if not self.kind.serving(p)]
            if not waiting:
                return
            self._check_members()
            if time.monotonic() > deadline:
                names = ", ".join(p.name for p in waiting)
                raise DbtesterError(
                    f"{self.db.id}: members {names} not serving after"
                    f" {READY_TIMEOUT_S:.0f} s (see server-*-database.log)"
                )
            time.sleep(0.25)

    def _mine(self, member: Any) -> bool:
        """A member of this run and database (an agent may hold older ones)."""
        return bool(member.run_id == self.run_id and member.database_id == self.db.id)

    def _check_members(self) -> None:
        for i, client in enumerate(self._clients):
            for member in client.status(timeout=5.0).members:
                if self._mine(member) and member.state == "exited":
                    raise DbtesterError(
                        f"{self.db.id}: member {i} on {client.address} {member.error}"
                    )

    @contextmanager
    def _heartbeats(self) -> Iterator[None]:
        """Status calls every second keep the agents' watchdogs quiet and tell us
        within MISSED_BEATS seconds when an agent or a member is gone."""
        stop = threading.Event()
        last_ok = [time.monotonic()] * len(self._clients)

        def beat() -> None:
            while not stop.wait(HEARTBEAT_S):
                for i, client in enumerate(self._clients):
                    try:
                        reply = client.status(timeout=HEARTBEAT_S)
                    except AgentError:
                        if time.monotonic() - last_ok[i] > MISSED_BEATS * HEARTBEAT_S:
                            self._health_problem = (
                                f"agent {client.address} stopped answering (member {i})"
                            )
                        continue
                    last_ok[i] = time.monotonic()
                    for member in reply.members:
                        if self._mine(member) and member.state == "exited":
                            self._health_problem = f"member {i} on {client.address} {member.error}"

        thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
        if self._health_problem and not self.error:
            raise DbtesterError(f"{self.db.id}: {self._health_problem}")

    def _diagnose(self) -> str:
        """Why the load may have failed: agents that do not answer, members that
        exited (asked once, right away, rather than waiting for heartbeats)."""
        problems = []
        for i, client in enumerate(self._clients):
            try:
                reply = client.status(timeout=2.0)
            except AgentError as exc:
                problems.append(
                    f"agent {client.address} (member {i}) is not answering:"
                    f" {exc.code.name if exc.code else exc}"
                )
                continue
            problems += [
                f"member {i} on {client.address} {m.error}"
                for m in reply.members
                if m.database_id == self.db.id and m.state == "exited"
            ]
        return "; ".join(problems)

    # ------------------------------------------------------------------ load

    def _settings(self) -> LoadSettings:
        w = self.db.workload
        return LoadSettings(
            endpoints=tuple(self.endpoints),
            client=self.db.client.model_dump(),
            key_size=w.key_size,
            value_size=w.value_size,
            consistency=w.consistency,
            timeout_s=w.request_timeout_s,
            same_key=w.same_key,
        )

    def _seed_if_read(self) -> None:
        if self.db.workload.type != "read":
            return
        settings = self._settings()
        key = KeySpace(1, settings.key_size, same_key=True).key(0)

        async def seed() -> None:
            client = self.kind.load_client(settings)
            try:
                await client.open(1)
                await client.write(0, key)
            finally:
                await client.close()

        try:
            asyncio.run(seed())
        except Exception as exc:
            raise DbtesterError(f"{self.db.id}: seeding the read key failed: {exc}") from None

    def _load(self) -> None:
        w = self.db.workload
        self.reporter.say(f"{self.db.id}: {w.type} load, {w.requests:,} requests")
        self.load = run_load(
            self.db.kind,
            self._settings(),
            w,
            self.out,
            workers=self.workers,
            max_error_rate=w.max_error_rate,
            progress=self.reporter.stream,
            label=self.db.id,
            health=lambda: self._health_problem,
        )
        if self.load.aborted:
            found = self._diagnose()
            cause = f"; {found}" if found and found not in self.load.aborted else ""
            raise DbtesterError(f"{self.db.id}: load stopped early: {self.load.aborted}{cause}")
        wrong = self.load.records.counts().get("wrong-value", 0)
        if wrong:
            raise DbtesterError(f"{self.db.id}: {wrong:,} reads returned a wrong value")

    def _account(self) -> None:
        """Count the keys in the database against what the load wrote: attempted,
        acknowledged, refused, unknown outcome, found. Never raises: a cluster
        that cannot be counted is noted in the error instead."""
        if self.db.workload.type != "write" or self.load is None:
            return
        counts = self.load.records.counts()
        acknowledged = counts.get("ok", 0)
        attempted = len(self.load.records)
        failed = sum(n for code, n in counts.items() if code in KNOWN_REFUSALS)
        unknown = attempted - acknowledged - failed
        if self.db.workload.same_key:
            low, high = (1 if acknowledged else 0), 1
        else:
            low, high = acknowledged, acknowledged + unknown
        try:
            found = self.kind.count_keys(self._settings())
        except Exception as exc:
            self._count_problem = f"counting keys failed: {exc}"
            self.reporter.say(f"{self.db.id}: {self._count_problem}")
            return
        self.verification = Verification(
            attempted,
            acknowledged,
            failed,
            unknown,
            low,
            high,
            found,
            lost=max(0, low - found),
            unexpected=max(0, found - high),
        )
        self.reporter.say(
            f"{self.db.id}: {found:,} keys found; {attempted:,} writes attempted,"
            f" {acknowledged:,} acknowledged, {failed:,} refused, {unknown:,} unknown outcome"
        )

    def _verify(self) -> None:
        """After writes, the keys in the database must match what was acknowledged."""
        if self._count_problem:
            raise DbtesterError(f"{self.db.id}: {self._count_problem}")
        v = self.verification
        if v is not None and not v.ok:
            raise DbtesterError(
                f"{self.db.id}: verification failed: {v.lost:,} acknowledged keys"
                f" lost, {v.unexpected:,} unexpected keys (found {v.found:,},"
                f" expected {v.expected_min:,}..{v.expected_max:,})"
            )

    # ------------------------------------------------------------------ stop

    def _stop_members(self, failed: bool) -> None:
        failed = failed or bool(self.error) or bool(self._health_problem)
        for i, client in enumerate(self._clients):
            record = self.members[i]
            try:
                reply = client.stop(self.run_id, self.db.id, i, failed=failed)
            except AgentError as exc:
                self.error = self.error or str(exc)
                continue
            record.disk_usage_bytes = reply.disk_usage_bytes
            record.stop_seconds = reply.stop_seconds
            record.killed = reply.killed
            record.exit_code = reply.exit_code
            record.samples = reply.samples
            record.archived_to = reply.archived_to
            if reply.archived_to and not failed:
                # The agent archives a member that died on its own, even late.
                self.error = self.error or (
                    f"{self.db.id}: member {i} on {client.address}"
                    f" had exited before the stop (exit code"
                    f" {reply.exit_code}); its data is kept at"
                    f" {reply.archived_to}"
                )
            self._fetch(client, i)

    def _fetch(self, client: AgentClient, index: int) -> None:
        names = {
            "metrics.csv": f"server-{index}-metrics.csv",
            "database.log": f"server-{index}-database.log",
            "agent.log": f"server-{index}-agent.log",
        }
        for name, target in names.items():
            try:
                client.fetch(self.run_id, self.db.id, index, name, self.out / target)
            except AgentError as exc:
                self.error = self.error or f"fetching {name} from {client.address}: {exc}"

    def _write_record(self) -> None:
        record: dict[str, Any] = {
            "schema": RUN_SCHEMA,
            "database": self.db.model_dump(mode="json"),
            "run_id": self.run_id,
            "started_unix": self.started_unix,
            "endpoints": self.endpoints,
            "embedded": self.db.embedded,
            "members": [asdict(m) for m in self.members],
            "error": self.error,
            "verification": asdict(self.verification) if self.verification else None,
            "load": None,
        }
        if self.load is not None:
            record["load"] = {
                "started_unix": self.load.started_unix,
                "ended_unix": self.load.ended_unix,
                "workers": self.load.workers,
                "cpu_seconds": self.load.cpu_seconds,
                "aborted": self.load.aborted,
                "counts": self.load.records.counts(),
            }
        (self.out / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n")


def _loopback(host: str) -> bool:
    return host.startswith("127.") or host.strip("[]") in ("::1", "localhost")


def _join(host: str, port: int) -> str:
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
