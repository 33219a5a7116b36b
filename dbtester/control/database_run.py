"""One database of a test case, start to finish: agents, members, readiness,
seeding, load, verification, stop, files — written to ``DIR/<db-id>/``.

Whatever happens (a failure, Ctrl-C), every member that was started is
stopped and its files are fetched; a failed database is archived on its
agents. :func:`run_database` returns the frozen :class:`DatabaseRecord` it
wrote; the heartbeat thread reports into a :class:`Health` of its own, never
into the record.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from dbtester.agent.client import AgentClient, ClockOffset
from dbtester.analyze.correctness import FaultSpan, judge, judge_watch
from dbtester.analyze.faults import windows
from dbtester.analyze.probes import Probe, ProbeRule
from dbtester.config.faults import Fault
from dbtester.config.model import DEFAULT_FAULT_RECOVERY_S, DatabaseSpec, Host
from dbtester.config.search import Search
from dbtester.control.agents import EmbeddedAgents, remote_tls, remote_token
from dbtester.control.faults import FaultRunner
from dbtester.control.search import ProbeLoads, SearchOutcome, search_rate
from dbtester.control.spread import LoadHosts, run_spread
from dbtester.databases import get_kind
from dbtester.databases.base import DatabaseKind, LoadSettings, Peer
from dbtester.errors import AgentError, DbtesterError
from dbtester.load import (
    STALLED,
    LoadOptions,
    LoadResult,
    load_keys,
    run_load,
    seed_key,
    wait_readable,
    warm_up,
)
from dbtester.proto import agent_pb2 as pb
from dbtester.results import (
    OPERATIONS,
    CorrectnessRecord,
    DatabaseLayout,
    DatabaseRecord,
    Environment,
    FaultRecord,
    LoadHostRecord,
    LoadWindow,
    MemberRecord,
    ProbeRecord,
    ResultsDir,
    SearchRecord,
    Verification,
    account,
)
from dbtester.util.net import free_port, is_loopback, join_host_port
from dbtester.util.progress import Reporter

__all__ = [
    "AGENT_WATCHDOG_S",
    "HEARTBEAT_S",
    "MISSED_BEATS",
    "DatabaseRun",
    "Health",
    "run_database",
]

HEARTBEAT_S = 1.0
MISSED_BEATS = 3  # an agent silent this many intervals fails the database
# An agent that hears nothing for this long stops its databases (a controller
# killed outright, a partitioned network); 10 missed heartbeats.
AGENT_WATCHDOG_S = 10.0
READY_TIMEOUT_S = 120.0
#: how long counting the keys is retried (a cluster may be electing a leader)
COUNT_RETRY_S = 20.0
COUNT_RETRY_PAUSE_S = 0.5

T = TypeVar("T")


def _on_each(
    clients: Sequence[AgentClient], call: Callable[[int, AgentClient], T]
) -> list[T | AgentError]:
    """``call(i, client)`` for every agent at once, in member order: the reply,
    or the AgentError it raised. Members start concurrently (each start waits
    0.5 s to see the member did not exit at once), so a trial's setup does not
    grow with the member count."""
    with ThreadPoolExecutor(max_workers=max(1, len(clients))) as pool:
        return list(pool.map(lambda ic: _caught(call, *ic), enumerate(clients)))


def _caught(
    call: Callable[[int, AgentClient], T], index: int, client: AgentClient
) -> T | AgentError:
    try:
        return call(index, client)
    except AgentError as exc:
        return exc


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


def run_database(
    db: DatabaseSpec,
    run_id: str,
    store: ResultsDir,
    scratch: Path,
    workers: int | None = None,
    reporter: Reporter | None = None,
    trial: int | None = None,
    faults: Sequence[Fault] = (),
    fault_recovery_s: float = DEFAULT_FAULT_RECOVERY_S,
    search: Search | None = None,
    load_hosts: Sequence[Host] = (),
) -> DatabaseRecord:
    """Run ``db`` (``trial`` k of a repeated run: a fresh cluster of its own)
    and return the record written into ``store``; a failure is in its
    ``error``. ``faults`` are applied during the load, which fails when no
    request succeeds for ``fault_recovery_s``. With ``search`` the load is a
    search for the highest rate that meets its target, on this one cluster.
    With ``load_hosts`` their agents share the measured load.
    KeyboardInterrupt propagates once the partial record is written."""
    run = DatabaseRun(
        db,
        run_id,
        store,
        scratch,
        workers,
        reporter or Reporter(),
        trial,
        faults,
        fault_recovery_s,
        search,
        load_hosts,
    )
    return run.run()


class DatabaseRun:
    """The steps of one database's run and the state they share while it lasts."""

    def __init__(
        self,
        db: DatabaseSpec,
        run_id: str,
        store: ResultsDir,
        scratch: Path,
        workers: int | None,
        reporter: Reporter,
        trial: int | None = None,
        faults: Sequence[Fault] = (),
        fault_recovery_s: float = DEFAULT_FAULT_RECOVERY_S,
        search: Search | None = None,
        load_hosts: Sequence[Host] = (),
    ) -> None:
        self.db = db
        #: the agents that share the measured load (none: this process runs it)
        self.load_hosts = tuple(load_hosts)
        self.load_host_records: tuple[LoadHostRecord, ...] = ()
        self.faults = tuple(faults)
        self.fault_recovery_s = fault_recovery_s
        self.fault_records: tuple[FaultRecord, ...] = ()
        self.peers: list[Peer] = []
        self.run_id = run_id
        self.trial = trial
        # Agents keep each trial's members apart: a fresh data dir every time.
        self.agent_run_id = run_id if trial is None else f"{run_id}-t{trial}"
        self.store = store
        self.out = store.database(db.id, trial)
        self.scratch = scratch if trial is None else scratch / f"trial-{trial}"
        self.workers = workers
        self.reporter = reporter
        self.members: list[MemberRecord] = []
        self.endpoints: list[str] = []
        self.error = ""
        self.verification: Verification | None = None
        self.load: LoadResult | None = None
        self.warmup: LoadResult | None = None
        #: a mixed workload's load phase
        self.loaded: LoadResult | None = None
        self.started_unix = 0.0
        #: the test case's search (None: one load at the workload's rate)
        self.search = search
        self.searched: SearchOutcome | None = None
        #: the checked clients' verdict (with the workload's ``check:``)
        self.correctness: CorrectnessRecord | None = None
        self.health = Health()
        self._clients: list[AgentClient] = []
        self._count_problem = ""

    @property
    def kind(self) -> DatabaseKind:
        return get_kind(self.db.kind)

    # ------------------------------------------------------------------ the run

    def run(self) -> DatabaseRecord:
        """Run this database; the record is always written, also on Ctrl-C."""
        self.out.root.mkdir(parents=True, exist_ok=True)
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
                self._judge_check()
        except DbtesterError as exc:
            self.error = str(exc)
        except KeyboardInterrupt:
            self.error = "interrupted (Ctrl-C)"
            raise
        finally:
            record = self._write_record()
            # Every request's record and watch event is saved now: the next
            # database and the analysis (which reads them from disk) should
            # not find them held here too (a watch load's 10^7 events: 300 MB).
            self.load = self.warmup = self.loaded = None
            self.searched = None
        return record

    @contextmanager
    def _cluster(self) -> Iterator[None]:
        if self.db.endpoints:
            self.endpoints = list(self.db.endpoints)
            yield
            return
        with ExitStack() as stack:
            peers = self._agents(stack)
            self.peers = peers
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
                Peer(f"m{i}", "127.0.0.1", {n: free_port() for n in kind.default_ports})
                for i in range(count)
            ]
        else:
            if any(not is_loopback(h.address) for h in self.db.hosts):
                _warn_plain_token(self.reporter)
            self._clients = [_remote_client(h) for h in self.db.hosts]
            peers = [
                Peer(f"m{i}", h.address, dict(kind.default_ports))
                for i, h in enumerate(self.db.hosts)
            ]
        for client in self._clients:
            stack.callback(client.close)
        for i, client in enumerate(self._clients):
            client.wait_ready(timeout=30.0)
            offset = _clock_offset(client)
            self.members.append(
                MemberRecord(
                    index=i,
                    host=peers[i].host,
                    agent=client.address,
                    clock_offset_s=offset.offset_s,
                    clock_rtt_s=offset.round_trip_s,
                )
            )
        return peers

    def _start_members(self, peers: list[Peer]) -> None:
        flags = self.db.flags.model_dump(exclude_none=True)
        self.reporter.say(
            f"{self.db.id}: starting {len(peers)} {self.db.kind} {self.db.version} member(s)"
        )
        replies = _on_each(
            self._clients,
            lambda i, client: client.start(
                run_id=self.agent_run_id,
                database_id=self.db.id,
                kind=self.db.kind,
                version=self.db.version,
                member_index=i,
                peers=peers,
                flags=flags,
                heartbeat_timeout_s=AGENT_WATCHDOG_S,
                cluster_token=f"{self.agent_run_id}-{self.db.id}",
            ),
        )
        for i, reply in enumerate(replies):
            if not isinstance(reply, AgentError):
                self.members[i] = self.members[i].model_copy(
                    update={
                        "pid": reply.pid,
                        "machine": _machine(reply),
                        "binary_sha256": reply.binary_sha256,
                    }
                )
        # The first failure in member order, once every start has returned (the
        # stop then reaches the members that did start).
        for reply in replies:
            if isinstance(reply, AgentError):
                raise reply
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
        return bool(member.run_id == self.agent_run_id and member.database_id == self.db.id)

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
                            self.health.report(
                                f"agent {client.address} stopped answering (member {i})"
                            )
                        continue
                    last_ok[i] = time.monotonic()
                    for member in reply.members:
                        if self._mine(member) and member.state == "exited":
                            self.health.report(f"member {i} on {client.address} {member.error}")

        thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
        if self.health.problem and not self.error:
            raise DbtesterError(f"{self.db.id}: {self.health.problem}")

    def _diagnose(self) -> str:
        """Why the load may have failed: agents that do not answer, members that
        exited (asked once, right away, rather than waiting for heartbeats)."""
        problems = []
        for i, client in enumerate(self._clients):
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
                if self._mine(m) and m.state == "exited"
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
            consistency=w.read_consistency,
            timeout_s=w.request_timeout_s,
            same_key=w.one_key,
        )

    def _seed_if_read(self) -> None:
        """Write what the load reads (read: the one key; mixed: the load
        phase's keys), then wait until every endpoint returns it."""
        w = self.db.workload
        try:
            if w.SEEDING == "one-key":
                seed_key(self.db.kind, self._settings())
            elif (phase := w.load_phase()) is not None:
                self.reporter.say(
                    f"{self.db.id}: load phase, {phase.requests:,} keys (not counted)"
                )
                self.loaded = load_keys(
                    self.db.kind,
                    self._settings(),
                    w,
                    workers=self.workers,
                    progress=self.reporter.stream,
                    label=self.db.id,
                )
            wait_readable(self.db.kind, self._settings(), w)
        except DbtesterError as exc:
            raise DbtesterError(f"{self.db.id}: {exc}") from None

    def _warm_up(self) -> None:
        w = self.db.workload
        if not w.warmup_requests:
            return
        self.reporter.say(f"{self.db.id}: warm-up, {w.warmup_requests:,} requests (not counted)")
        try:
            self.warmup = warm_up(
                self.db.kind,
                self._settings(),
                w,
                workers=self.workers,
                progress=self.reporter.stream,
                label=self.db.id,
                health=lambda: self.health.problem,
            )
        except DbtesterError as exc:
            raise DbtesterError(f"{self.db.id}: {exc}") from None

    def _load(self) -> None:
        self._warm_up()
        if self.search is not None:
            self._search(self.search)
            return
        w = self.db.workload
        with ExitStack() as stack:
            drive = self._spread(stack) if self.load_hosts else self._here
            runner = self._fault_runner()
            runner.start(time.time())
            try:
                self.load = drive(
                    LoadOptions(
                        workers=self.workers,
                        # Errors are what a scheduled fault is for: counted, never a limit.
                        max_error_rate=1.0 if self.faults else w.max_error_rate,
                        # ... but a cluster that never recovers must not be loaded forever
                        stall_s=self.fault_recovery_s if self.faults else None,
                        progress=self.reporter.stream,
                        label=self.db.id,
                        health=lambda: self.health.problem or runner.problem,
                        warm_inserts=self._warm_inserts(),
                    )
                )
            finally:
                self.fault_records = runner.stop()
        if self.load.aborted.startswith(STALLED):
            raise DbtesterError(f"{self.db.id}: {self._not_recovered()}")
        self._check_loads("load", (self.load,))

    def _here(self, options: LoadOptions) -> LoadResult:
        """The measured load from this process's engine."""
        w = self.db.workload
        self.reporter.say(f"{self.db.id}: {w.type} load, {w.requests:,} requests")
        return run_load(self.db.kind, self._settings(), w, self.out, options)

    def _spread(self, stack: ExitStack) -> Callable[[LoadOptions], LoadResult]:
        """The measured load from the load hosts' agents, merged here: their
        clients (closed with ``stack``) and clock offsets first."""
        if any(not is_loopback(h.address) for h in self.load_hosts):
            _warn_plain_token(self.reporter)
        clients = [_remote_client(h) for h in self.load_hosts]
        for client in clients:
            stack.callback(client.close)
        offsets = []
        for client in clients:
            try:
                client.wait_ready(timeout=30.0)
                offsets.append(_clock_offset(client))
            except AgentError as exc:
                raise DbtesterError(f"{self.db.id}: load host {exc}") from None
        hosts = LoadHosts(tuple(clients), tuple(offsets), self.agent_run_id, self.db.id)

        def drive(options: LoadOptions) -> LoadResult:
            w = self.db.workload
            self.reporter.say(
                f"{self.db.id}: {w.type} load, {w.requests:,} requests from"
                f" {len(clients)} load hosts"
            )
            try:
                spread = run_spread(self.db.kind, self._settings(), w, self.out, hosts, options)
            except DbtesterError as exc:
                raise DbtesterError(f"{self.db.id}: {exc}") from None
            self.load_host_records = spread.hosts
            return spread.result

        return drive

    def _search(self, search: Search) -> None:
        """Probe rates on this cluster until the search ends; the highest
        passing probe (none: the lowest rate tried) becomes the trial's load."""
        w = self.db.workload
        label = f"p{search.percentile:g}"
        self.reporter.say(
            f"{self.db.id}: searching the highest {w.type} rate with {label} within"
            f" {search.slo_ms:g} ms ({search.hold_s:g} s per rate, from"
            f" {search.start_rate:,g}/s)"
        )
        probes = ProbeLoads(
            self.db.kind,
            self._settings(),
            w,
            self.out,
            LoadOptions(
                workers=self.workers,
                progress=self.reporter.stream,
                label=self.db.id,
                health=lambda: self.health.problem,
                warm_inserts=self._warm_inserts(),
            ),
        )
        self.searched = outcome = search_rate(
            probes,
            rule=ProbeRule(search.slo_ms, search.percentile, w.max_error_rate),
            clients=w.clients,
            hold_s=search.hold_s,
            start_rate=search.start_rate,
            precision=search.precision,
            budget_s=search.time_budget,
            say=lambda line: self.reporter.say(f"{self.db.id}: {line}"),
        )
        if outcome.chosen is not None:
            self.load = outcome.loads[outcome.chosen]
            _adopt(self.out.probe(outcome.chosen + 1), self.out)
        self.reporter.say(f"{self.db.id}: {_found(outcome, search)}")
        # a probe that stopped early ends the search: it is the last one
        self._check_loads(f"probe {len(outcome.loads)}", outcome.loads)

    def _check_loads(self, last: str, loads: Sequence[LoadResult]) -> None:
        """DbtesterError when the last of ``loads`` (named ``last``) stopped
        early, saying why if the agents can tell, or when any read a wrong
        value."""
        aborted = loads[-1].aborted if loads else ""
        if aborted:
            found = self._diagnose()
            cause = f"; {found}" if found and found not in aborted else ""
            raise DbtesterError(f"{self.db.id}: {last} stopped early: {aborted}{cause}")
        wrong = sum(load.records.counts().get("wrong-value", 0) for load in loads)
        if wrong:
            raise DbtesterError(f"{self.db.id}: {wrong:,} reads returned a wrong value")

    def _warm_inserts(self) -> int:
        """How many keys the warm-up inserted (a mixed workload's later
        inserts are numbered after them)."""
        if self.warmup is None:
            return 0
        return int((self.warmup.records.ops == OPERATIONS.index("insert")).sum())

    def _not_recovered(self) -> str:
        """The load stalled: what the cluster did not recover from."""
        assert self.load is not None
        stalled = self.load.aborted
        applied = [r for r in self.fault_records if not r.error]
        last = applied[-1] if applied else None
        after = f" after {last.action} member {last.member} at {last.at_s:g} s" if last else ""
        return (
            f"the cluster did not recover{after}: {stalled} (fault_recovery:"
            f" {self.fault_recovery_s:g} s)"
        )

    def _fault_runner(self) -> FaultRunner:
        return FaultRunner(
            self.faults,
            self.kind,
            self.peers,
            self._clients,
            [m.clock_offset_s for m in self.members],
            (self.agent_run_id, self.db.id),
            self.reporter,
            self.db.id,
        )

    def _account(self) -> None:
        """Count the keys in the database against what the load wrote: attempted,
        acknowledged, refused, unknown outcome, found. Never raises: a cluster
        that cannot be counted is noted in the error instead."""
        if not self.db.workload.VERIFIED or self.load is None:
            return
        try:
            found = self._count_keys()
        except Exception as exc:
            self._count_problem = f"counting keys failed: {exc}"
            self.reporter.say(f"{self.db.id}: {self._count_problem}")
            return
        counts = self._key_writes()
        v = account(counts, found, same_key=self.db.workload.one_key)
        self.verification = v
        self.reporter.say(
            f"{self.db.id}: {v.found:,} keys found; {v.attempted:,} writes attempted,"
            f" {v.acknowledged:,} acknowledged, {v.failed:,} refused,"
            f" {v.unknown:,} unknown outcome"
        )

    def _key_writes(self) -> Counter[str]:
        """The outcomes of the requests that create keys. The warm-up's are in
        the database too: every acknowledged one must be there as well. A
        mixed workload's keys are its load phase's (all acknowledged) and its
        inserts; its updates create none."""
        measured = self.searched.loads if self.searched else (self.load,)
        runs = [r for r in (self.loaded, self.warmup, *measured) if r is not None]
        counts: Counter[str] = Counter()
        for run in runs:
            records = run.records
            if run is not self.loaded:
                records = self.db.workload.key_writes(records)
            counts.update(records.counts())
        return counts

    def _count_keys(self) -> int:
        """The kind's key count, asked again for up to COUNT_RETRY_S: right after
        a member died the cluster may still be electing a leader ("leader
        changed", a connection refused), which says nothing about the keys."""
        deadline = time.monotonic() + COUNT_RETRY_S
        settings = self._settings()
        endpoints = settings.endpoints
        while True:
            try:
                return self.kind.count_keys(replace(settings, endpoints=endpoints))
            except Exception:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(COUNT_RETRY_PAUSE_S)
            # The next try asks the next member first: one a fault left down
            # answers nothing.
            endpoints = endpoints[1:] + endpoints[:1]

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
        failed = failed or bool(self.error) or bool(self.health.problem)
        for i, client in enumerate(self._clients):
            # One at a time: a member stopped while the others stop too can take
            # far longer (etcd: 7 s instead of ~1 s when all three got SIGTERM
            # together, each waiting for peers that were going away).
            try:
                reply = client.stop(self.agent_run_id, self.db.id, i, failed=failed)
            except AgentError as exc:
                self.error = self.error or str(exc)
                continue
            self.members[i] = self.members[i].model_copy(
                update={
                    "disk_usage_bytes": reply.disk_usage_bytes,
                    "stop_seconds": reply.stop_seconds,
                    "killed": reply.killed,
                    "exit_code": reply.exit_code,
                    "samples": reply.samples,
                    "archived_to": reply.archived_to,
                }
            )
            if reply.stopped_by:
                # Its agent stopped it before we asked (its watchdog, when our
                # calls stopped reaching it): not a death of the member's own.
                self.error = self.error or (
                    f"{self.db.id}: member {i} on {client.address} was stopped by"
                    f" {reply.stopped_by}, before the controller's stop; its data"
                    f" is kept at {reply.archived_to}"
                )
            elif reply.archived_to and not failed:
                # The agent archives a member that died on its own, even late.
                self.error = self.error or (
                    f"{self.db.id}: member {i} on {client.address}"
                    f" had exited before the stop (exit code"
                    f" {reply.exit_code}); its data is kept at"
                    f" {reply.archived_to}"
                )
            self._fetch(client, i)

    def _fetch(self, client: AgentClient, index: int) -> None:
        targets = {
            "metrics.csv": self.out.server_metrics(index),
            "database.log": self.out.server_log(index),
            "agent.log": self.out.agent_log(index),
        }
        for name, target in targets.items():
            try:
                client.fetch(self.agent_run_id, self.db.id, index, name, target)
            except AgentError as exc:
                self.error = self.error or f"fetching {name} from {client.address}: {exc}"

    def _record(self) -> DatabaseRecord:
        return DatabaseRecord(
            run_id=self.run_id,
            database=self.db.model_dump(mode="json"),
            started_unix=self.started_unix,
            endpoints=tuple(self.endpoints),
            embedded=self.db.embedded,
            members=tuple(self.members),
            error=self.error,
            verification=self.verification,
            load=_window(self.load),
            warmup=_window(self.warmup),
            load_phase=_window(self.loaded),
            faults=self.fault_records,
            trial=self.trial,
            search=self._search_record(),
            correctness=self.correctness,
            load_hosts=self.load_host_records,
            notes=tuple(
                n
                for n in [
                    self._load_note(),
                    self._load_hosts_note(),
                    self._load_phase_note(),
                    self._warmup_note(),
                    self._faults_note(),
                    self._search_note(),
                    self._watch_note(),
                ]
                if n
            ),
        )

    def _judge_check(self) -> None:
        """The workload's ``check:``: the checked clients' history held to
        linearizability, or the watchers' events to the watch guarantees; a
        violation fails the database's run unless the test case says to
        report only."""
        check, load = self.db.workload.check, self.load
        if check is None or load is None:
            return
        spans = [
            FaultSpan(
                f"fault {w.number} ({w.describe()})",
                load.started_unix + w.start_s,
                None if w.end_s is None else load.started_unix + w.end_s,
            )
            for w in windows(self.fault_records, load.started_unix)
        ]
        if not check.runs_clients:
            if load.watch is not None:
                self.correctness = judge_watch(
                    load.watch, on_violation=check.on_violation, faults=spans
                )
        elif load.check is not None:
            serializable = self.db.workload.read_consistency == "serializable"
            self.correctness = judge(
                load.check,
                clients=check.clients,
                keys=check.keys,
                on_violation=check.on_violation,
                serializable=serializable,
                faults=spans,
            )
        violation = self.correctness.violation if self.correctness is not None else None
        if violation is not None and check.on_violation == "fail":
            what = "not linearizable: key" if check.runs_clients else "watch guarantees broken:"
            raise DbtesterError(
                f"{what} {violation.key}: {violation.reason}"
                " (run.json's correctness has the details)"
            )

    def _watch_note(self) -> str | None:
        """How this kind's watchers work, where it shapes the figures."""
        if not self.db.workload.WATCHES:
            return None
        return self.kind.watch_note or None

    def _search_record(self) -> SearchRecord | None:
        search, outcome = self.search, self.searched
        if search is None:
            return None
        probes: tuple[ProbeRecord, ...] = ()
        if outcome is not None:
            again = len(outcome.probes) if outcome.confirmed is not None else 0
            probes = tuple(
                _probe_record(i + 1, probe, load, again=i + 1 == again)
                for i, (probe, load) in enumerate(zip(outcome.probes, outcome.loads, strict=True))
            )
        return SearchRecord(
            slo_ms=search.slo_ms,
            percentile=search.percentile,
            hold_s=search.hold_s,
            start_rate=search.start_rate,
            precision=search.precision,
            time_budget_s=search.time_budget,
            probes=probes,
            maximum=outcome.maximum if outcome else None,
            failing=outcome.failing if outcome else None,
            stopped=outcome.stopped if outcome else "",
            chosen=None if outcome is None or outcome.chosen is None else outcome.chosen + 1,
            confirmed=outcome.confirmed if outcome else None,
        )

    def _search_note(self) -> str | None:
        outcome, search = self.searched, self.search
        if outcome is None or search is None or outcome.chosen is None:
            return None
        chosen = outcome.probes[outcome.chosen]
        which = (
            "the highest rate that passed"
            if outcome.maximum is not None
            else "the lowest rate tried; none passed"
        )
        return (
            f"{_found(outcome, search)}; the latency and throughput rows are the"
            f" {chosen.offered:,.0f}/s probe's ({which}), every probe is in run.json's search"
        )

    def _faults_note(self) -> str | None:
        if not self.faults:
            return None
        done = "; ".join(f.describe() for f in self.faults)
        return f"scheduled faults during the load: {done} (each as it happened: run.json faults)"

    def _warmup_note(self) -> str | None:
        n = self.db.workload.warmup_requests
        if not n:
            return None
        return f"{n:,} warm-up requests ran before the load and are in no figure"

    def _load_phase_note(self) -> str | None:
        if self.loaded is None:
            return None
        took = self.loaded.ended_unix - self.loaded.started_unix
        return (
            f"a load phase wrote {len(self.loaded.records):,} keys in {took:.1f} s before the"
            " load; it is in no figure"
        )

    def _load_hosts_note(self) -> str | None:
        return load_hosts_note(self.load_host_records)

    def _load_note(self) -> str | None:
        w = self.db.workload
        return self.kind.load_note(w.clients, min(w.connections, w.clients))

    def _write_record(self) -> DatabaseRecord:
        record = self._record()
        self.store.write_record(record)
        return record


def _remote_client(host: Host) -> AgentClient:
    """A client of the agent on ``host``, with the remote token and TLS."""
    tls = remote_tls()
    return AgentClient(
        join_host_port(host.address, host.agent_port),
        remote_token(),
        tls_ca=tls.get("tls_ca"),
        tls_cert=tls.get("tls_cert"),
        tls_key=tls.get("tls_key"),
    )


def _warn_plain_token(reporter: Reporter) -> None:
    if remote_token() and not remote_tls():
        reporter.say(
            "warning: sending the agent token without TLS; set $DBTESTER_AGENT_TLS_CA to encrypt it"
        )


def _clock_offset(client: AgentClient) -> ClockOffset:
    """The agent's clock offset, from the fastest of five round trips."""
    return min((client.clock_offset() for _ in range(5)), key=lambda o: o.round_trip_s)


def load_hosts_note(hosts: Sequence[LoadHostRecord]) -> str | None:
    """The load hosts' shares, throughput, CPU and start skew in one note;
    a host whose engine was at its CPU limit is named first."""
    if not hosts:
        return None
    busy = [h for h in hosts if h.cpu_limited]
    parts = []
    for h in hosts:
        cpu = ""
        if h.engine_cpu_seconds is not None and h.ended_unix > h.started_unix:
            used = h.engine_cpu_seconds / (h.workers * (h.ended_unix - h.started_unix))
            cpu = f", engine CPU {used:.0%}"
            if h.cpu_wait_seconds:
                waited = h.cpu_wait_seconds / (h.workers * (h.ended_unix - h.started_unix))
                cpu += f" (+{waited:.0%} waiting for one)"
        parts.append(
            f"host {h.index} ({h.agent}) {sum(h.counts.values()):,} requests,"
            f" {h.throughput:,.0f} req/s{cpu}"
        )
    skews = [abs(h.start_skew_ms) for h in hosts if h.start_skew_ms is not None]
    offsets = max(abs(h.clock_offset_s) for h in hosts) * 1000.0
    text = (
        f"Load from {len(hosts)} hosts: {'; '.join(parts)}. Clock offsets up to"
        f" {offsets:,.1f} ms, corrected"
    )
    text += f"; worst start skew {max(skews):,.1f} ms." if skews else "."
    if busy:
        named = ", ".join(f"host {h.index} ({h.agent})" for h in busy)
        text = (
            f"{named} ran its engine at its CPU limit: the figures measure that client"
            f" as much as the database. " + text
        )
    return text


def _window(load: LoadResult | None) -> LoadWindow | None:
    if load is None:
        return None
    return LoadWindow(
        started_unix=load.started_unix,
        ended_unix=load.ended_unix,
        workers=load.workers,
        cpu_seconds=load.cpu_seconds,
        cpu_wait_seconds=load.cpu_wait_seconds,
        engine_cpu_seconds=load.engine_cpu_seconds,
        aborted=load.aborted,
        counts=load.records.counts(),
    )


def _probe_record(number: int, probe: Probe, load: LoadResult, *, again: bool) -> ProbeRecord:
    window = _window(load)
    assert window is not None
    return ProbeRecord(
        number=number,
        offered=probe.offered,
        achieved=probe.achieved,
        latency_ms=probe.latency_ms,
        error_rate=probe.error_rate,
        trend_tau=probe.trend.tau,
        trend_p_value=probe.trend.p_value,
        trend_rise_ms=probe.trend.rise_ms,
        trend_median_ms=probe.trend.median_ms,
        trend_seconds=probe.trend.seconds,
        trend_end_ms=probe.trend.end_ms,
        engine_lag_ms=probe.engine_lag_ms,
        engine_busy=probe.engine_busy,
        client_bound=probe.client_bound,
        failures=probe.failures,
        load=window,
        again=again,
    )


def _found(outcome: SearchOutcome, search: Search) -> str:
    """What a search established, in one sentence."""
    target = f"p{search.percentile:g} within {search.slo_ms:g} ms"
    tried = f"{len(outcome.probes)} probe{'s' if len(outcome.probes) != 1 else ''}"
    if outcome.maximum is None:
        if outcome.stopped == "nothing meets the target":
            return f"no rate met {target}, down to {outcome.failing:,g}/s ({tried})"
        return f"no rate met {target} before the search stopped ({outcome.stopped}; {tried})"
    found = f"the highest rate with {target} is {outcome.maximum:,.0f}/s"
    if outcome.stopped == "precision" and outcome.failing is not None:
        return f"{found}; {outcome.failing:,.0f}/s failed ({tried}){_again(outcome)}"
    why = {
        "client-bound": "the client could not offer more, so the database may sustain more",
        "ceiling": "the highest rate a search offers",
        "time budget": f"the time budget ({search.time_budget:g} s) ran out",
        "key space": "key_size holds no more keys",
    }.get(outcome.stopped, outcome.stopped)
    return f"{found} at least: {why} ({tried})"


def _again(outcome: SearchOutcome) -> str:
    """What probing the maximum once more at the end showed."""
    if outcome.confirmed is None:
        return ""
    if outcome.confirmed:
        return "; it passed again when probed once more at the end"
    last = outcome.probes[-1]
    return (
        f"; probed once more at the end it failed ({'; '.join(last.failures)}): the cluster"
        " was slower after the search's probes (their data stays, and some overloaded it),"
        " so this maximum depends on the order of the probes"
    )


def _adopt(probe: DatabaseLayout, trial: DatabaseLayout) -> None:
    """The chosen probe's requests and client metrics become the trial's own
    (linked where the file system allows, else copied)."""
    for source, target in (
        (probe.requests, trial.requests),
        (probe.client_metrics, trial.client_metrics),
    ):
        if not source.exists():
            continue
        target.unlink(missing_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)


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
