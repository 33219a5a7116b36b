"""Typed, frozen records of what a results directory holds, each with
``to_json`` / ``from_json``.

``from_json`` takes a file's content already brought to the current schema
(:func:`dbtester.results.schema.upgrade`); ``to_json`` writes the current
schema version into the file. Per-request records are numpy arrays
(:class:`dbtester.results.requests.Records`), not these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from dbtester.results.schema import SCHEMA_VERSION

__all__ = [
    "KNOWN_REFUSALS",
    "CheckedOperationRecord",
    "CompactionRecord",
    "ComparisonRecord",
    "CorrectnessRecord",
    "DatabaseRecord",
    "DatabaseSummary",
    "Environment",
    "FaultRecord",
    "FaultSummary",
    "FigureValue",
    "InformerRecord",
    "LoadHostRecord",
    "LoadWindow",
    "LookRecord",
    "Machines",
    "MemberRecord",
    "ProbeRecord",
    "RunSummary",
    "SearchRecord",
    "SequentialRecord",
    "Verification",
    "ViolationRecord",
    "WatchCheckRecord",
    "account",
]

FigureValue = float | int | str | None

# Failures that mean the write was refused, never applied; every other failure
# (timeouts, UNAVAILABLE, a dropped connection) leaves its outcome unknown.
KNOWN_REFUSALS = frozenset(
    {
        "INVALID_ARGUMENT",
        "FAILED_PRECONDITION",
        "RESOURCE_EXHAUSTED",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
        "UNIMPLEMENTED",
        "wrong-value",
    }
)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls.model_validate(data)


class _Versioned(_Record):
    """A whole file: it names the schema version it was written in."""

    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "schema_version": SCHEMA_VERSION}


#: what two runs' machines must share for their figures to be compared
_HARDWARE = ("cpu_model", "cores", "memory_gib", "kernel")


class Environment(_Record):
    """The machine and software a run measured on."""

    model_config = ConfigDict(frozen=True, extra="allow")  # fields may be added

    hostname: str = ""
    kernel: str = ""
    cpu_model: str = ""
    cores: int | None = None
    memory_gib: float | None = None
    python: str = ""
    dbtester: str = ""
    grpcio: str = ""
    fsync_ms_median: float | None = None
    fsync_probe_dir: str = ""

    def differences(self, other: Environment) -> list[str]:
        """What makes figures measured on ``other`` not comparable with these:
        the CPU model, cores, memory and kernel, where both are known."""
        found = []
        for name in _HARDWARE:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine not in ("", None) and theirs not in ("", None) and mine != theirs:
                found.append(f"{name} {mine!r} against {theirs!r}")
        return found

    def hardware(self) -> Environment:
        """Only what :meth:`differences` compares (no host name, no software)."""
        return Environment(**{name: getattr(self, name) for name in _HARDWARE})

    def summary(self) -> str:
        """One line for a README: kernel, CPU, cores, memory."""
        parts = {
            "kernel": self.kernel,
            "cpu_model": self.cpu_model,
            "cores": self.cores,
            "memory_gib": self.memory_gib,
        }
        return ", ".join(f"{k}: {v}" for k, v in parts.items() if v not in ("", None))


class Machines(_Record):
    """The hardware one database's figures were measured on: the client's
    (the controller's machine) and its servers' (its members' hosts, each
    distinct one once)."""

    client: Environment | None = None
    servers: tuple[Environment, ...] = ()

    def differences(self, other: Machines) -> list[str]:
        """How ``other``'s hardware differs from this (nothing where either
        side is unknown, as for runs recorded before the agents described
        their hosts)."""
        found = []
        if self.client is not None and other.client is not None:
            found += [f"client {d}" for d in self.client.differences(other.client)]
        mine = {s.hardware() for s in self.servers}
        theirs = {s.hardware() for s in other.servers}
        if mine and theirs and mine != theirs:
            if len(mine) == len(theirs) == 1:
                (a,), (b,) = mine, theirs
                found += [f"servers {d}" for d in a.differences(b)]
            else:
                found.append(
                    f"servers {' / '.join(sorted(m.summary() for m in mine))} against"
                    f" {' / '.join(sorted(t.summary() for t in theirs))}"
                )
        return found


class MemberRecord(_Record):
    """One member of a database's cluster: where it ran and how it stopped."""

    index: int
    host: str
    agent: str  # the agent's host:port
    clock_offset_s: float = 0.0  # the agent's clock minus the controller's
    clock_rtt_s: float = 0.0
    pid: int = 0
    disk_usage_bytes: int = 0
    stop_seconds: float = 0.0
    killed: bool = False
    exit_code: int = 0
    samples: int = 0
    archived_to: str = ""
    #: the member's host as its agent described it (results schema 8; None
    #: before, or from an agent older than that)
    machine: Environment | None = None
    #: the digest of the installed files the member ran (Installed.sha256)
    binary_sha256: str = ""


class CompactionRecord(_Record):
    """One compaction a ``type: kubernetes`` load made as kube-apiserver
    does (results schema 16): from its Compact request's send to its reply,
    which came once the database had removed what it compacted away."""

    started_unix: float
    ended_unix: float
    revision: int  # what it compacted to


class InformerRecord(_Record):
    """One informer of a ``type: kubernetes`` load (results schema 16): how
    long its first list took, what it did since, and whether its copy of
    the objects was, at the end, exactly a fresh list of them."""

    synced_s: float  # from its start to its first list's end
    relists: int  # lists again: its watch's start was compacted away
    resumes: int  # watches made again after a stream ended
    events: int
    converged: bool  # it reached the last revision and its copy was compared
    problems: tuple[str, ...] = ()  # the first events or objects found wrong
    problem_count: int = 0  # all of them


class LoadWindow(_Record):
    """When the load ran and what it cost the client."""

    started_unix: float
    ended_unix: float
    workers: int
    cpu_seconds: float  # the load generator's, user + system
    aborted: str = ""  # why the load stopped early ("" if it did not)
    #: the load engine's threads' time waiting for a CPU, and on one (Linux
    #: schedstat; None: not measured, or before results schema 9)
    cpu_wait_seconds: float | None = None
    engine_cpu_seconds: float | None = None
    counts: dict[str, int] = Field(default_factory=dict)  # outcome -> requests
    #: what the workload counted beside the requests, by name (type:
    #: kubernetes' conflicts, retries, list pages and the objects its end
    #: must find; results schema 15)
    counters: dict[str, int] = Field(default_factory=dict)
    compactions: tuple[CompactionRecord, ...] = ()  # type: kubernetes' (schema 16)
    informers: tuple[InformerRecord, ...] = ()  # type: kubernetes' (schema 16)
    #: type: kubernetes' events seen expiring: (a second's start, unix s;
    #: how many), seconds without any left out (schema 17)
    expirations: tuple[tuple[float, int], ...] = ()


class LoadHostRecord(_Record):
    """One load host's share of a spread load and how it ran (``load_hosts:``)."""

    index: int
    agent: str  # the agent's host:port
    clock_offset_s: float  # the agent's clock minus the controller's
    clock_rtt_s: float
    requests: int  # its share
    clients: int  # its share of the largest client step
    connections: int
    rate: float  # requests per second it offered (0: as fast as it could)
    #: its first request's due time minus when it was told to start, on the
    #: controller's clock (its schedule's offset in the interleaving taken out)
    start_skew_ms: float | None = None
    #: when its load began, on the controller's clock: the common start (its
    #: engine connected before it), or later if its engine started late
    started_unix: float
    ended_unix: float  # its last answer, on the controller's clock
    counts: dict[str, int] = Field(default_factory=dict)  # outcome -> requests
    throughput: float  # answered per second, over its own span
    cpu_seconds: float  # its agent process's, user + system
    engine_cpu_seconds: float | None = None
    cpu_wait_seconds: float | None = None
    workers: int
    cores: int = 0
    #: its engine threads were runnable (on a CPU or waiting for one) 75% of
    #: the load's time: the figures then measure this client as much as the
    #: database
    cpu_limited: bool = False


class Verification(_Record):
    """Keys found in the database after a write load, against what was written."""

    attempted: int
    acknowledged: int
    failed: int  # refused: never applied
    unknown: int  # outcome unknown: may or may not have been applied
    expected_min: int
    expected_max: int
    found: int
    lost: int
    unexpected: int

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.unexpected == 0


def account(counts: Mapping[str, int], found: int, *, same_key: bool) -> Verification:
    """What ``found`` keys mean for a write load whose requests ended with
    ``counts`` (outcome -> requests): every acknowledged write must be there,
    refused ones must not, and those of unknown outcome may be."""
    attempted = sum(counts.values())
    acknowledged = counts.get("ok", 0)
    failed = sum(n for code, n in counts.items() if code in KNOWN_REFUSALS)
    unknown = attempted - acknowledged - failed
    if same_key:
        low, high = (1 if acknowledged else 0), 1
    else:
        low, high = acknowledged, acknowledged + unknown
    return Verification(
        attempted=attempted,
        acknowledged=acknowledged,
        failed=failed,
        unknown=unknown,
        expected_min=low,
        expected_max=high,
        found=found,
        lost=max(0, low - found),
        unexpected=max(0, found - high),
    )


class FaultRecord(_Record):
    """One scheduled fault as it happened (the test case's ``faults:``)."""

    at_s: float  # when it was due, seconds after the load's start
    action: str  # kill, restart, pause, resume, isolate, heal, slow_disk, ... (config/faults.py)
    target: str  # as written: an index, "leader", "follower", or "" (undoes the latest)
    member: int | None = None  # the member it hit (None when it could not be resolved)
    unix: float | None = None  # when it took effect, on the controller's clock
    pid: int = 0  # the member's PID after it (a restart's new one)
    #: for a kill, pause or isolate of the leader: seconds until another member was
    #: reported as leader (None when none was within the bound, or not the leader)
    new_leader_s: float | None = None
    error: str = ""  # why it could not be applied ("" when it was)
    #: an isolate whose member's clients still reached it (schema 10)
    keep_clients: bool = False
    #: a maintenance event (compact, defrag, snapshot, transfer_leader): when it
    #: finished, on the controller's clock, and what it did (schema 12)
    end_unix: float | None = None
    detail: str = ""
    to: str = ""  # an upgrade: the version the member ran from it on
    fsync_ms: float | None = None  # a slow_disk: what each fsync waited longer (schema 13)
    lock: int | None = None  # an expire_session: the lock whose holder crashed (schema 21)


class ProbeRecord(_Record):
    """One probe of a search: a rate held, its figures and its verdict
    (dbtester.analyze.probes states the rule)."""

    number: int  # from 1; its requests are in <db-id>/probe-<number>/
    offered: float  # requests per second
    achieved: float  # answered per second
    latency_ms: float  # the search's percentile of every request's latency
    error_rate: float
    #: Kendall's tau, its one-sided p and the Theil-Sen rise of each second's
    #: percentile over the hold, and that percentile's median across seconds
    trend_tau: float
    trend_p_value: float
    trend_rise_ms: float
    trend_median_ms: float
    trend_seconds: int
    #: the Theil-Sen line's value at the hold's last second
    trend_end_ms: float = 0.0
    #: the engine's own lateness: the search's percentile of (sent - due)
    #: over the requests due while a client was free
    engine_lag_ms: float
    #: the CPU the engine's threads used or waited for over the probe, per
    #: worker thread (1.0: all its time; None: not measured)
    engine_busy: float | None = None
    #: the engine fell behind its schedule: the probe measured the client
    client_bound: bool
    failures: tuple[str, ...] = ()  # why it failed (none: it passed)
    load: LoadWindow
    #: the highest passing rate probed once more after the bisection ended
    again: bool = False

    @property
    def passed(self) -> bool:
        return not self.failures


class SearchRecord(_Record):
    """A search's target, its probes in order, and what it established."""

    slo_ms: float
    percentile: float
    hold_s: float
    start_rate: float
    precision: float
    time_budget_s: float
    probes: tuple[ProbeRecord, ...] = ()
    #: the highest offered rate that passed (None: none did)
    maximum: float | None = None
    #: the lowest offered rate that failed (None: none did)
    failing: float | None = None
    #: why it ended: "precision", "nothing meets the target", "ceiling",
    #: "client-bound", "time budget" or "stopped early"
    stopped: str = ""
    #: the probe whose requests are the trial's own files (the highest
    #: passing one; none passing: the lowest rate tried)
    chosen: int | None = None
    #: whether the maximum passed again when probed once more at the end
    #: (None: not probed again)
    confirmed: bool | None = None


class CheckedOperationRecord(_Record):
    """One checked client's operation, as a violation names it."""

    client: int
    key: str  # "c0", "c1", ...
    kind: str  # read, write
    value: int  # written or read; 0: the key was absent
    outcome: str  # ok, unknown
    invoked_unix: float
    completed_unix: float | None = None  # None: no reply (outcome unknown)
    #: the member its client's connection was on when it ended (an index into
    #: the database's endpoints; None: the protocol cannot tell)
    member: int | None = None


class ViolationRecord(_Record):
    """The first violation found: why, the operations involved, and whether
    it fell inside a fault window."""

    key: str
    reason: str
    operations: tuple[CheckedOperationRecord, ...]
    #: the fault windows the operations overlap ("" when none)
    during_fault: str = ""


class WatchCheckRecord(_Record):
    """A watch load's watchers held to the watch guarantees (schema 10)."""

    watchers: int
    #: acknowledged puts' events, every watcher's
    events_expected: int
    missed: int
    duplicated: int
    out_of_order: int
    #: replies that split a revision (etcd)
    split: int
    #: the watchers with any of the four (numbered from 0)
    violated_watchers: tuple[int, ...] = ()


class CorrectnessRecord(_Record):
    """The verdict on the workload's ``check:`` (schema 10): the checked
    clients' history (model linearizability), or the watchers' events
    (model watch, whose counts are in ``watch``)."""

    model: str  # linearizability, watch, informer (schema 17)
    clients: int  # checked clients; the watchers for model watch
    keys: int  # checked keys; 0 for model watch
    on_violation: str  # fail, report
    operations: int  # recorded, every outcome
    #: keys whose history held, broke, or could not be checked
    linearizable_keys: int
    violated_keys: int
    not_checked: tuple[str, ...] = ()  # "c3: too large (...)"
    #: serializable reads that returned a value already overwritten
    stale_serializable_reads: int = 0
    violation: ViolationRecord | None = None
    watch: WatchCheckRecord | None = None

    @property
    def linearizable(self) -> bool:
        return self.violated_keys == 0 and not self.not_checked

    @property
    def held(self) -> bool:
        """Whether what was checked held, whichever the model."""
        return self.violation is None and not self.not_checked


class DatabaseRecord(_Versioned):
    """``<db-id>/run.json``: one database's run, written once it is over."""

    run_id: str
    database: dict[str, Any]  # the test case's entry, as it ran
    started_unix: float
    endpoints: tuple[str, ...] = ()
    embedded: bool = True
    members: tuple[MemberRecord, ...] = ()
    error: str = ""
    verification: Verification | None = None
    load: LoadWindow | None = None
    #: the warm-up before the load (``warmup_requests``), counted in no figure
    warmup: LoadWindow | None = None
    #: a mixed workload's load phase (``key_count`` keys), counted in no figure
    load_phase: LoadWindow | None = None
    #: the scheduled faults applied during the load, in order
    faults: tuple[FaultRecord, ...] = ()
    #: which trial of a repeated run (None: the database ran once)
    trial: int | None = None
    #: what the table alone does not say about this run (e.g. how a kind
    #: that cannot multiplex shared its connections)
    notes: tuple[str, ...] = ()
    #: a test case's ``search:``: its probes and what it found (schema 9)
    search: SearchRecord | None = None
    #: the workload's ``check:``: its history's verdict (schema 10)
    correctness: CorrectnessRecord | None = None
    #: the load hosts that shared the measured load (none: this machine ran it)
    load_hosts: tuple[LoadHostRecord, ...] = ()
    #: the engine's outcome for a read of a key that is not there, where the
    #: kind gives it one (ZooKeeper's NoNode, NATS's key-not-found; schema 14):
    #: a mixed load's read of a key known to exist that gets it was stale
    not_found_outcome: str = ""
    #: interleave: slices: this trial was one slice of this many seconds on a
    #: cluster started once (None: a trial on a fresh cluster; schema 19)
    slice_s: float | None = None

    @property
    def id(self) -> str:
        return str(self.database.get("id", ""))

    @property
    def kind(self) -> str:
        return str(self.database.get("kind", ""))

    @property
    def version(self) -> str:
        return str(self.database.get("version", ""))

    @property
    def passed(self) -> bool:
        return not self.error

    @property
    def load_start(self) -> float:
        """The moment seconds in charts count from: the load's start."""
        return self.load.started_unix if self.load else self.started_unix


class FaultSummary(_Record):
    """What one scheduled fault did to the load (``result.json``): a member
    taken out and, when it was, brought back. Times are seconds since the
    load started, by completion (dbtester.analyze.faults defines each)."""

    number: int  # from 1: FAULT-<number>-... rows
    action: str  # kill, pause
    target: str  # as written: an index, "leader", "follower"
    member: int | None
    undo: str = ""  # restart, resume ("" when not undone within the load)
    start_s: float
    end_s: float | None = None  # when it was undone
    description: str = ""
    trial: int | None = None  # which trial (None: the database ran once)
    new_leader_s: float | None = None
    #: the longest stretch with no successful request, and when it began
    unavailable_s: float
    unavailable_from_s: float
    #: whether throughput came back to 90% of its median before the fault
    recovered: bool
    recovery_s: float | None = None
    errors: dict[str, int] = Field(default_factory=dict)  # kind -> failures after it
    p99_before_ms: float | None = None  # 10 s before the fault
    p99_during_ms: float | None = None  # while the member was out
    p99_after_ms: float | None = None  # 10 s after it was back
    slowest_ms: float | None = None  # from the fault to 10 s after it was back
    #: watch loads: events of puts sent from the fault on that a watcher
    #: missed, duplicates that arrived then, and the p99 watch latency of
    #: puts sent from the fault to 10 s after it was undone (None otherwise)
    watch_missed: int | None = None
    watch_duplicated: int | None = None
    watch_p99_ms: float | None = None
    #: a maintenance event: how long it took, and what it did (schema 12)
    took_s: float | None = None
    detail: str = ""
    #: a lock load (schema 21): the lock an expire_session hit, how many locks
    #: were held when the fault struck, and the seconds until each had a new
    #: holder (None: not within the load; analyze.faults defines it)
    lock: int | None = None
    locks_held: int | None = None
    lock_recovery_s: float | None = None


class DatabaseSummary(_Record):
    """One database in ``result.json``: its verdict and every table figure."""

    id: str
    label: str
    kind: str
    version: str
    passed: bool
    error: str | None = None
    verification: Verification | None = None
    figures: dict[str, FigureValue] = Field(default_factory=dict)  # trials' means
    notes: tuple[str, ...] = ()
    trials: int = 1
    #: row -> half-width of the 95% interval of its mean (rows with 2+ trials)
    intervals: dict[str, float] = Field(default_factory=dict)
    #: every trial's figures, in trial order (2+ trials only)
    trial_figures: tuple[dict[str, FigureValue], ...] = ()
    #: what each scheduled fault did, per trial
    faults: tuple[FaultSummary, ...] = ()
    #: the hardware of its members' hosts, each distinct one once (schema 8)
    servers: tuple[Environment, ...] = ()
    #: the digests of the installed files its members ran, each distinct one once
    binaries: tuple[str, ...] = ()


class ComparisonRecord(_Record):
    """One database against the baseline (the first) on one row."""

    baseline: str  # database ids
    database: str
    row: str
    change_pct: float | None
    low_pct: float | None  # the 95% interval of the change
    high_pct: float | None
    p_value: float | None
    verdict: str  # faster slower more less ~ ?
    #: a paired t-test over rounds of slices (schema 19); else Welch's over trials
    paired: bool = False


class LookRecord(_Record):
    """``repeat: auto``: one database against the baseline on one stopping
    metric, as decided (or as it stood when the trials stopped)."""

    baseline: str  # database ids
    database: str
    row: str
    trials: int  # the pairs of trials the look had
    change_pct: float | None
    low_pct: float | None  # the look's interval (analyze/sequential.py)
    high_pct: float | None
    state: str  # different, equivalent, open
    verdict: str  # faster slower more less, "equivalent", or "undecided"


class SequentialRecord(_Record):
    """How a ``repeat: auto`` run decided when to stop."""

    stopped: str  # "decided", "max_trials" or "time_budget"
    trials: int  # rounds run (each database's trials)
    max_trials: int
    time_budget_s: float | None
    equivalence_pct: float
    looks: tuple[LookRecord, ...] = ()


class RunSummary(_Versioned):
    """``result.json``: written when a run starts, completed by the analysis."""

    run_id: str
    source: str
    started_unix: float
    environment: Environment
    title: str = ""
    analyzed_by: str | None = None
    repeat: int = 1
    databases: tuple[DatabaseSummary, ...] = ()
    comparisons: tuple[ComparisonRecord, ...] = ()
    #: repeat: auto runs only: why the trials stopped, and each decision
    sequential: SequentialRecord | None = None

    def machines(self, database: DatabaseSummary) -> Machines:
        """The hardware ``database``'s figures were measured on."""
        return Machines(client=self.environment.hardware(), servers=database.servers)
