from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Peer(_message.Message):
    __slots__ = ("name", "host", "ports")
    class PortsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    host: str
    ports: _containers.ScalarMap[str, int]
    def __init__(self, name: _Optional[str] = ..., host: _Optional[str] = ..., ports: _Optional[_Mapping[str, int]] = ...) -> None: ...

class StartRequest(_message.Message):
    __slots__ = ("run_id", "database_id", "kind", "version", "member_index", "peers", "flags_json", "sample_interval_s", "heartbeat_timeout_s", "cluster_token", "slow_disk", "tls", "auth")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DATABASE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MEMBER_INDEX_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    FLAGS_JSON_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SLOW_DISK_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    AUTH_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    database_id: str
    kind: str
    version: str
    member_index: int
    peers: _containers.RepeatedCompositeFieldContainer[Peer]
    flags_json: str
    sample_interval_s: float
    heartbeat_timeout_s: float
    cluster_token: str
    slow_disk: bool
    tls: MemberTls
    auth: bool
    def __init__(self, run_id: _Optional[str] = ..., database_id: _Optional[str] = ..., kind: _Optional[str] = ..., version: _Optional[str] = ..., member_index: _Optional[int] = ..., peers: _Optional[_Iterable[_Union[Peer, _Mapping]]] = ..., flags_json: _Optional[str] = ..., sample_interval_s: _Optional[float] = ..., heartbeat_timeout_s: _Optional[float] = ..., cluster_token: _Optional[str] = ..., slow_disk: _Optional[bool] = ..., tls: _Optional[_Union[MemberTls, _Mapping]] = ..., auth: _Optional[bool] = ...) -> None: ...

class MemberTls(_message.Message):
    __slots__ = ("ca_pem", "cert_pem", "key_pem")
    CA_PEM_FIELD_NUMBER: _ClassVar[int]
    CERT_PEM_FIELD_NUMBER: _ClassVar[int]
    KEY_PEM_FIELD_NUMBER: _ClassVar[int]
    ca_pem: str
    cert_pem: str
    key_pem: str
    def __init__(self, ca_pem: _Optional[str] = ..., cert_pem: _Optional[str] = ..., key_pem: _Optional[str] = ...) -> None: ...

class Host(_message.Message):
    __slots__ = ("hostname", "kernel", "cpu_model", "cores", "memory_gib")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    CPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    kernel: str
    cpu_model: str
    cores: int
    memory_gib: float
    def __init__(self, hostname: _Optional[str] = ..., kernel: _Optional[str] = ..., cpu_model: _Optional[str] = ..., cores: _Optional[int] = ..., memory_gib: _Optional[float] = ...) -> None: ...

class StartResponse(_message.Message):
    __slots__ = ("pid", "data_dir", "started_unix", "host", "binary_sha256")
    PID_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    BINARY_SHA256_FIELD_NUMBER: _ClassVar[int]
    pid: int
    data_dir: str
    started_unix: float
    host: Host
    binary_sha256: str
    def __init__(self, pid: _Optional[int] = ..., data_dir: _Optional[str] = ..., started_unix: _Optional[float] = ..., host: _Optional[_Union[Host, _Mapping]] = ..., binary_sha256: _Optional[str] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("run_id", "database_id", "member_index", "failed", "grace_s")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DATABASE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_INDEX_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    database_id: str
    member_index: int
    failed: bool
    grace_s: float
    def __init__(self, run_id: _Optional[str] = ..., database_id: _Optional[str] = ..., member_index: _Optional[int] = ..., failed: _Optional[bool] = ..., grace_s: _Optional[float] = ...) -> None: ...

class StopResponse(_message.Message):
    __slots__ = ("disk_usage_bytes", "killed", "exit_code", "stop_seconds", "archived_to", "samples", "stopped_by")
    DISK_USAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    KILLED_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STOP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_TO_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    STOPPED_BY_FIELD_NUMBER: _ClassVar[int]
    disk_usage_bytes: int
    killed: bool
    exit_code: int
    stop_seconds: float
    archived_to: str
    samples: int
    stopped_by: str
    def __init__(self, disk_usage_bytes: _Optional[int] = ..., killed: _Optional[bool] = ..., exit_code: _Optional[int] = ..., stop_seconds: _Optional[float] = ..., archived_to: _Optional[str] = ..., samples: _Optional[int] = ..., stopped_by: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MemberStatus(_message.Message):
    __slots__ = ("run_id", "database_id", "member_index", "state", "pid", "exit_code", "sampling", "samples", "error", "isolated")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DATABASE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ISOLATED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    database_id: str
    member_index: int
    state: str
    pid: int
    exit_code: int
    sampling: bool
    samples: int
    error: str
    isolated: bool
    def __init__(self, run_id: _Optional[str] = ..., database_id: _Optional[str] = ..., member_index: _Optional[int] = ..., state: _Optional[str] = ..., pid: _Optional[int] = ..., exit_code: _Optional[int] = ..., sampling: _Optional[bool] = ..., samples: _Optional[int] = ..., error: _Optional[str] = ..., isolated: _Optional[bool] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("agent_version", "wall_time_unix", "members", "hostname")
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_UNIX_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    agent_version: str
    wall_time_unix: float
    members: _containers.RepeatedCompositeFieldContainer[MemberStatus]
    hostname: str
    def __init__(self, agent_version: _Optional[str] = ..., wall_time_unix: _Optional[float] = ..., members: _Optional[_Iterable[_Union[MemberStatus, _Mapping]]] = ..., hostname: _Optional[str] = ...) -> None: ...

class ListFilesRequest(_message.Message):
    __slots__ = ("run_id", "database_id", "member_index")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DATABASE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_INDEX_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    database_id: str
    member_index: int
    def __init__(self, run_id: _Optional[str] = ..., database_id: _Optional[str] = ..., member_index: _Optional[int] = ...) -> None: ...

class FileInfo(_message.Message):
    __slots__ = ("name", "size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class ListFilesResponse(_message.Message):
    __slots__ = ("files",)
    FILES_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[FileInfo]
    def __init__(self, files: _Optional[_Iterable[_Union[FileInfo, _Mapping]]] = ...) -> None: ...

class FetchFileRequest(_message.Message):
    __slots__ = ("run_id", "database_id", "member_index", "name")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DATABASE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    database_id: str
    member_index: int
    name: str
    def __init__(self, run_id: _Optional[str] = ..., database_id: _Optional[str] = ..., member_index: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("data", "offset")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ...) -> None: ...

class FaultRequest(_message.Message):
    __slots__ = ("run_id", "database_id", "member_index", "keep_clients", "version", "fsync_ms", "companion")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DATABASE_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_INDEX_FIELD_NUMBER: _ClassVar[int]
    KEEP_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FSYNC_MS_FIELD_NUMBER: _ClassVar[int]
    COMPANION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    database_id: str
    member_index: int
    keep_clients: bool
    version: str
    fsync_ms: float
    companion: bool
    def __init__(self, run_id: _Optional[str] = ..., database_id: _Optional[str] = ..., member_index: _Optional[int] = ..., keep_clients: _Optional[bool] = ..., version: _Optional[str] = ..., fsync_ms: _Optional[float] = ..., companion: _Optional[bool] = ...) -> None: ...

class FaultResponse(_message.Message):
    __slots__ = ("at_unix", "pid", "state", "isolated")
    AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ISOLATED_FIELD_NUMBER: _ClassVar[int]
    at_unix: float
    pid: int
    state: str
    isolated: bool
    def __init__(self, at_unix: _Optional[float] = ..., pid: _Optional[int] = ..., state: _Optional[str] = ..., isolated: _Optional[bool] = ...) -> None: ...

class LoadRequest(_message.Message):
    __slots__ = ("run_id", "database_id", "plan_json", "start_unix")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DATABASE_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_JSON_FIELD_NUMBER: _ClassVar[int]
    START_UNIX_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    database_id: str
    plan_json: str
    start_unix: float
    def __init__(self, run_id: _Optional[str] = ..., database_id: _Optional[str] = ..., plan_json: _Optional[str] = ..., start_unix: _Optional[float] = ...) -> None: ...

class LoadProgress(_message.Message):
    __slots__ = ("done", "errors")
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    done: int
    errors: int
    def __init__(self, done: _Optional[int] = ..., errors: _Optional[int] = ...) -> None: ...

class LoadFile(_message.Message):
    __slots__ = ("name", "data", "offset")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    name: str
    data: bytes
    offset: int
    def __init__(self, name: _Optional[str] = ..., data: _Optional[bytes] = ..., offset: _Optional[int] = ...) -> None: ...

class LoadSummary(_message.Message):
    __slots__ = ("started_unix", "ended_unix", "cpu_seconds", "engine_cpu_seconds", "cpu_wait_seconds", "workers", "cores", "error")
    STARTED_UNIX_FIELD_NUMBER: _ClassVar[int]
    ENDED_UNIX_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CPU_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    started_unix: float
    ended_unix: float
    cpu_seconds: float
    engine_cpu_seconds: float
    cpu_wait_seconds: float
    workers: int
    cores: int
    error: str
    def __init__(self, started_unix: _Optional[float] = ..., ended_unix: _Optional[float] = ..., cpu_seconds: _Optional[float] = ..., engine_cpu_seconds: _Optional[float] = ..., cpu_wait_seconds: _Optional[float] = ..., workers: _Optional[int] = ..., cores: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class LoadReply(_message.Message):
    __slots__ = ("progress", "file", "summary")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    progress: LoadProgress
    file: LoadFile
    summary: LoadSummary
    def __init__(self, progress: _Optional[_Union[LoadProgress, _Mapping]] = ..., file: _Optional[_Union[LoadFile, _Mapping]] = ..., summary: _Optional[_Union[LoadSummary, _Mapping]] = ...) -> None: ...

class StopLoadRequest(_message.Message):
    __slots__ = ("run_id", "database_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DATABASE_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    database_id: str
    def __init__(self, run_id: _Optional[str] = ..., database_id: _Optional[str] = ...) -> None: ...

class StopLoadResponse(_message.Message):
    __slots__ = ("stopped",)
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    stopped: bool
    def __init__(self, stopped: _Optional[bool] = ...) -> None: ...
