# The native load engine (engine/, Rust; built by maturin as dbtester._engine).
# Plan and its parts are the one contract for what crosses into the engine:
# dbtester/load/native.py builds it, the engine checks its types and what it
# needs (memory, key numbers that fit); defaults and the test case's bounds
# live in dbtester/config/model.py only. The TypedDicts exist for type
# checking alone (the module itself does not define them).
from typing import Literal, NotRequired, TypedDict, final

import numpy as np
import numpy.typing as npt

class StepPlan(TypedDict):
    clients: int
    connections: int
    requests: int
    rate: float  # requests/s; 0 = closed loop

class KeysPlan(TypedDict):
    # keys first .. first + existing exist before the run; reads, updates and
    # read-modify-writes choose among them; insert n creates key
    # first + existing + (n, or a seeded permutation of n)
    existing: int
    first: int
    choose: Literal["same", "uniform", "zipfian", "latest", "hotspot"]
    inserts: Literal["sequential", "permuted"]
    insert_space: int
    zipfian_constant: float
    hot_set_fraction: float
    hot_operation_fraction: float

class MixPlan(TypedDict):
    # shares of the requests, adding up to 1
    read: float
    update: float
    insert: float
    read_modify_write: float

class WatchPlan(TypedDict):
    watchers: int
    connections: int  # at most watchers
    drain_s: float  # how long after the last put every event may take

class CheckPlan(TypedDict):
    clients: int  # checked clients, each on a connection of its own
    keys: int  # the keys they read and write ("c0", "c1", ...)

class KubernetesMixPlan(TypedDict):
    # shares of the requests, adding up to 1
    get: float
    list: float
    create: float
    update: float
    delete: float
    event: float

class KubernetesPlan(TypedDict):
    # object n is <prefix>ns-<n % namespaces>/obj-<n, 10 digits>, its value
    # value_size bytes; run: the shares of mix over the objects a first
    # (unmeasured) list finds, their number held between count / 2 and
    # count * 3 / 2; load: request r creates object first + r; read:
    # every request gets object first
    phase: Literal["run", "load", "read"]
    prefix: str  # "/registry/<resource>/"
    count: int
    namespaces: int
    page_size: int  # objects per page of a list
    first: int
    mix: KubernetesMixPlan
    # kube-apiserver's compactor beside a run: claim, then compact to the
    # revision seen one interval before (0: never)
    compaction_interval_s: float
    # informers beside a run: each lists the objects, then watches them from
    # that revision, relisting when compacted away; checked at the end
    informers: int
    # events (mix "event"): <events_prefix>ns-<n % namespaces>/ev-<n>, each
    # created with a lease as kube-apiserver's lease manager attaches them:
    # one reused for lease_reuse_s or lease_max_objects events, granted for
    # event_ttl_s + lease_reuse_s (rounded up)
    events_prefix: str
    event_ttl_s: int
    lease_reuse_s: float
    lease_max_objects: int

class LockPlan(TypedDict):
    # lock n is <prefix>lock-<n>/, under which each locker's recipe makes its
    # key (etcd: <name><lease in hex>, on its lease); each acquisition holds
    # its lock hold_s, on a session of ttl_s each locker opens before the load
    prefix: str
    count: int
    hold_s: float
    ttl_s: int
    # at at_s after the load's start the holder of lock `lock` (or the next
    # one to take it) crashes: it stops keeping its session alive, drops it
    # without ending it and never releases; result["expired"] says who and when
    expire: NotRequired[list[ExpirePlan]]

class ExpirePlan(TypedDict):
    at_s: float
    lock: int

class TlsPlan(TypedDict):
    # PEM text, checked when the plan is; errors name the key, never its text
    ca: str  # one or more CA certificates the servers' must chain to
    cert: str | None  # client certificate chain (mutual TLS); with key
    key: str | None  # its private key: PKCS#8, PKCS#1 or SEC1; with cert
    # the name the servers' certificates must hold (None: each endpoint's
    # host); zookeeper takes None only
    server_name: str | None

class Plan(TypedDict):
    protocol: str  # the engine's: etcd, zookeeper, consul
    endpoints: list[str]
    options: dict[str, object]  # the protocol's own, every key given
    key_size: int
    value_size: int
    values: Literal["fixed", "tagged"]
    keys: KeysPlan
    mix: MixPlan
    consistency: Literal["linearizable", "serializable"]
    timeout_s: float
    steps: list[StepPlan]
    threads: int
    max_errors: int | None
    seed: int
    write_id_base: int
    watch: WatchPlan | None  # watchers of the keys written (type: watch)
    check: CheckPlan | None  # checked clients beside the load
    # unix ns the first request is due, once connected (0: at once); load hosts
    start_unix_ns: NotRequired[int]
    tls: NotRequired[TlsPlan | None]  # TLS to the database (None: plain TCP)
    # credentials, keys by protocol (None: none): etcd and zookeeper
    # {"user", "password"} (etcd: Authenticate, its token on every call;
    # zookeeper: digest auth), consul {"token"} (X-Consul-Token)
    auth: NotRequired[dict[str, str] | None]
    # Kubernetes' objects and traffic (type: kubernetes) instead of keys and mix
    objects: NotRequired[KubernetesPlan | None]
    # locks contended for (type: lock) instead of keys and mix
    locks: NotRequired[LockPlan | None]

class WatchResult(TypedDict):
    watcher: npt.NDArray[np.uint16]
    key: npt.NDArray[np.uint32]
    latency_us: npt.NDArray[np.uint32]
    arrival_ms: npt.NDArray[np.uint32]
    seen: npt.NDArray[np.uint64]
    words: int
    duplicates: npt.NDArray[np.uint64]
    out_of_order: npt.NDArray[np.uint64]
    foreign: npt.NDArray[np.uint64]
    origin_unix_ns: int
    acked: npt.NDArray[np.uint64]  # bit k: the put of key offset k was acknowledged
    coalesced: npt.NDArray[np.uint64]
    split: npt.NDArray[np.uint64]
    sent_ms: npt.NDArray[np.uint32]
    duplicate_watcher: npt.NDArray[np.uint16]
    duplicate_ms: npt.NDArray[np.uint32]

class CheckResult(TypedDict):
    client: npt.NDArray[np.uint16]
    key: npt.NDArray[np.uint16]
    write: npt.NDArray[np.uint8]
    ended: npt.NDArray[np.uint8]  # 0 ok, 2 unknown
    value: npt.NDArray[np.uint64]  # 0: absent; 2**64 - 1: bytes no checked client wrote
    invoked_ns: npt.NDArray[np.int64]
    completed_ns: npt.NDArray[np.int64]
    member: npt.NDArray[np.uint16]  # the endpoint's index; 2**16 - 1: unknown

class Result(TypedDict):
    due_ns: npt.NDArray[np.int64]
    latency_ns: npt.NDArray[np.int64]
    service_ns: npt.NDArray[np.int64]
    code: npt.NDArray[np.uint8]
    step: npt.NDArray[np.uint16]
    # 0 read, 1 update, 2 insert, 3 read-modify-write, 4 get, 5 list, 6 create,
    # 7 delete, 8 event, 9 acquire (OPERATIONS)
    op: npt.NDArray[np.uint8]
    # 1: an open-loop request that found every client busy at its due time and
    # waited for one (the open loop's queue); 0: sent as soon as it was due, so
    # latency_ns - service_ns is its send lag (due time to the engine sending)
    queued: npt.NDArray[np.uint8]
    codes: list[str]
    stopped: str
    watch: NotRequired[WatchResult]  # plans with watchers only
    check: NotRequired[CheckResult]  # plans with checked clients only
    # what the workload counted beside the records (type: kubernetes; else empty)
    counters: dict[str, int]
    # type: lock: every acquisition: (lock, locker, acquire sent, acquired,
    # release begun (0: never), fencing token), unix ns on the records' clock
    holds: list[tuple[int, int, int, int, int, int]]
    # type: lock: each expire_session applied: (its index in locks.expire, the
    # lock, the locker that crashed, when it did: unix ns on the records' clock)
    expired: list[tuple[int, int, int, int]]

@final
class Load:
    def progress(self) -> tuple[int, int, int]: ...
    def began_unix_ns(self) -> int | None: ...
    def stop(self) -> None: ...
    def wait(self, timeout_s: float) -> bool: ...
    def result(self) -> Result: ...

def start(plan: Plan) -> Load: ...

OPERATIONS: tuple[str, ...]
