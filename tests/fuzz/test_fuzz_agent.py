"""Fuzz the agent's request handlers over the network: a real ``dbtester agent
serve`` on loopback gets every RPC with arbitrary field values and arbitrary
bytes as the message.

After every example the agent must have answered each call with a gRPC
status (never UNKNOWN, which means a handler raised; INTERNAL only for bytes
that are not a message), still answer Health, have written nothing outside
its data root, and have no child process but the allow-listed stand-in
database. With ``strace`` on the machine, every file the agent opens for
writing, creates, renames or removes, and every program it executes, is
checked too (the agent is traced, ``strace -ff -p``).

The allow-list (``binaries:`` in the agent's config) maps each kind to a
stand-in script, so a well-formed Start really starts a "database".
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2
from hypothesis import strategies as st

from dbtester.control.agents import spawn_agent
from dbtester.databases import KINDS
from dbtester.proto import agent_pb2 as pb
from tests.fuzz.engine import budget, fuzz
from tests.fuzz.mutate import HOSTILE_TEXT, hostile_values, mutate_bytes, rarely
from tests.integration.agents import kill_groups, terminate
from tests.support.poll import poll_until

pytestmark = pytest.mark.fuzz

CORPUS = Path(__file__).parent / "corpus" / "agent"
SERVICE = "/dbtester.agent.v1.Agent/"
HEALTH = "/grpc.health.v1.Health/Check"
VERSIONS = {
    "etcd": "3.5.17",
    "zookeeper": "3.8.0",
    "consul": "1.22.0",
    "kine": "0.17.5",
    "nats": "2.15.2",
}
REQUESTS: dict[str, Any] = {
    "Start": pb.StartRequest,
    "Stop": pb.StopRequest,
    "Status": pb.StatusRequest,
    "ListFiles": pb.ListFilesRequest,
    "FetchFile": pb.FetchFileRequest,
    "Load": pb.LoadRequest,
    "StopLoad": pb.StopLoadRequest,
}
#: statuses a handler may answer with; UNKNOWN (an exception in a handler),
#: UNAVAILABLE (the agent gone) and DEADLINE_EXCEEDED (a hang) fail
ANSWERS = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
CALL_TIMEOUT_S = 60.0
#: what a request may set (0: the agent's default). Below 0.1 s, or not a
#: number, a sampler spins: a core busy and metrics.csv growing without end;
#: an endless grace period makes Stop wait forever on a database that ignores
#: SIGTERM.
BOUNDS = {
    "Start": {"sample_interval_s": (0.1, 60.0), "heartbeat_timeout_s": (0.1, 86_400.0)},
    "Stop": {"grace_s": (0.0, 600.0)},
}

STAND_IN = """#!/bin/sh
# A stand-in for a database the agent is allowed to run: up until signalled.
trap 'exit 0' TERM INT
while :; do sleep 1 & wait $!; done
"""


# ---------------------------------------------------------------------- the agent under test


@dataclass
class Agent:
    sandbox: Path
    process: subprocess.Popen[str]
    address: str
    data_root: Path
    stderr: Path
    token: str
    binary: Path
    channel: grpc.Channel
    trace: Path | None = None
    tracer: subprocess.Popen[bytes] | None = None
    trace_seen: dict[str, int] = field(default_factory=dict)
    outside_before: set[str] = field(default_factory=set)
    started: dict[tuple[str, str, int], float] = field(default_factory=dict)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)


def _snapshot(sandbox: Path, data_root: Path) -> set[str]:
    """Every path in the sandbox outside the agent's data root."""
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(sandbox):
        here = Path(dirpath)
        if here == data_root:
            dirnames[:] = []
            continue
        found.update(str(here / n) for n in [*dirnames, *filenames])
    return found - {str(data_root)}


def _start_tracer(agent: Agent) -> None:
    """``strace`` every thread of the agent and whatever it starts."""
    if shutil.which("strace") is None:
        return
    trace = agent.sandbox / "trace" / "agent"
    trace.parent.mkdir()
    agent.tracer = subprocess.Popen(
        [
            *("strace", "-ff", "-qq", "-y", "-s", "4096", "-e", "trace=%file,execve,execveat"),
            *("-o", str(trace), "-p", str(agent.process.pid)),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    agent.trace = trace
    # Tracing has begun once a lookup the agent makes on a Start shows up.
    tracer = agent.tracer
    probe = pb.StartRequest(run_id="probe", database_id="probe", kind="etcd", version="0.0.0")

    def attached() -> str:
        if tracer.poll() is not None:
            return "refused"
        call(agent, "Start", probe.SerializeToString())
        traced = any("0.0.0" in p.read_text(errors="replace") for p in trace.parent.iterdir())
        return "attached" if traced else ""

    if poll_until(attached, 20, interval_s=0.2, message="strace did not attach") == "refused":
        # ptrace refused (a container without CAP_SYS_PTRACE): the files
        # the agent leaves behind are still checked after every example
        print(f"[fuzz] agent: strace could not attach (exit {tracer.returncode})")
        agent.tracer = agent.trace = None


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    sandbox = tmp_path_factory.mktemp("agent-fuzz").resolve()
    for name in ("bin", "home", "cwd", "tmp", "outside"):
        (sandbox / name).mkdir()
    binary = sandbox / "bin" / "stand-in-database"
    binary.write_text(STAND_IN)
    binary.chmod(0o755)
    root = sandbox / "agent"
    root.mkdir()
    token = os.urandom(16).hex()
    (root / "token").write_text(token)
    (root / "token").chmod(0o600)
    entries = {"etcd": {"etcd": str(binary)}, "consul": {"consul": str(binary)}}
    entries["kine"] = {"kine": str(binary)}
    entries["nats"] = {"nats-server": str(binary)}
    entries["zookeeper"] = {"java": str(binary), "classpath": str(binary)}
    config = {
        "binaries": {kind: {VERSIONS[kind]: entry} for kind, entry in entries.items()},
        "stop_grace_s": 2,
    }
    (root / "agent.yaml").write_text(json.dumps(config))
    env = {
        **os.environ,
        "HOME": str(sandbox / "home"),
        "DBTESTER_HOME": str(sandbox / "home" / "dbtester"),
        "TMPDIR": str(sandbox / "tmp"),
    }
    options = ["--token-file", str(root / "token"), "--config", str(root / "agent.yaml")]
    here = os.getcwd()
    os.chdir(sandbox / "cwd")  # the agent's working directory: nothing may appear there
    try:
        local = spawn_agent(root, options, env)
    finally:
        os.chdir(here)
    channel = grpc.insecure_channel(local.address)
    running = Agent(
        sandbox, local.process, local.address, local.data_root, local.log, token, binary, channel
    )
    try:
        _start_tracer(running)
        running.outside_before = _snapshot(sandbox, running.data_root)
        yield running
    finally:
        channel.close()
        _stop(running)


def _stop(agent: Agent) -> None:
    """strace (detached first: a traced agent sat out the whole 30 s of
    SIGTERM's grace without handling it), then the agent by its PID (SIGTERM:
    it stops its members), then anything left in the members' process groups."""
    leftovers = []
    if agent.process.poll() is None:
        leftovers = [p.pid for p in psutil.Process(agent.process.pid).children(recursive=True)]
    if agent.tracer is not None and agent.tracer.poll() is None:
        agent.tracer.terminate()
        agent.tracer.wait(10)
    terminate(agent.process)
    kill_groups(leftovers)


# ---------------------------------------------------------------------- calls


@dataclass
class Answer:
    code: grpc.StatusCode
    details: str
    reply: bytes


def call(
    agent: Agent,
    rpc: str,
    message: bytes,
    metadata: tuple[tuple[str, str], ...] | None = None,
    method: str | None = None,
) -> Answer:
    """One call with ``message`` as the raw request bytes."""
    name = method or (HEALTH if rpc == "Health" else SERVICE + rpc)
    md = agent.metadata if metadata is None else metadata
    try:
        if rpc in ("FetchFile", "Load"):
            stream: Any = agent.channel.unary_stream(
                name, request_serializer=None, response_deserializer=None
            )
            chunks = []
            for chunk in stream(message, metadata=md, timeout=CALL_TIMEOUT_S):
                chunks.append(chunk)
            return Answer(grpc.StatusCode.OK, "", b"".join(chunks[:4]))
        unary: Any = agent.channel.unary_unary(
            name, request_serializer=None, response_deserializer=None
        )
        return Answer(grpc.StatusCode.OK, "", unary(message, metadata=md, timeout=CALL_TIMEOUT_S))
    except grpc.RpcError as exc:
        return Answer(exc.code(), exc.details() or "", b"")


# ---------------------------------------------------------------------- requests


def _canaries(agent: Agent) -> list[str]:
    """Names that would land outside the data root if used as paths."""
    outside = agent.sandbox / "outside"
    return [str(outside), str(outside / "x"), "../../../outside", "../" * 8 + str(outside)[1:]]


def strings(agent: Agent) -> st.SearchStrategy[str]:
    names = ["r1", "r2", "db", "db-2", "m0", "m1", "etcd", "zookeeper", "consul", "3.5.17"]
    return st.one_of(
        st.sampled_from(names),
        st.sampled_from([t for t in HOSTILE_TEXT if _utf8(t)]),
        st.sampled_from(_canaries(agent)),
        st.text(max_size=40),
        st.builds(lambda s: s + "\n", st.sampled_from(names)),
    )


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


UINT32 = st.sampled_from([0, 1, 2, 3, 9, 2**31, 2**32 - 1]) | st.integers(0, 2**32 - 1)
DOUBLES = (
    st.sampled_from([0.0, -0.0, 1e-300, 1e-9, 0.05, 0.5, 2.0, 1e300, -1.0])
    | st.sampled_from([math.inf, -math.inf, math.nan])
    | st.floats()
)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def valid_start(draw: st.DataObject) -> pb.StartRequest:
    kind = draw.draw(st.sampled_from(sorted(KINDS)), label="kind")
    count = draw.draw(st.integers(1, 3), label="members")
    peers = [
        pb.Peer(
            name=f"m{i}",
            host="127.0.0.1",
            ports={name: _free_port() for name in KINDS[kind].default_ports},
        )
        for i in range(count)
    ]
    return pb.StartRequest(
        run_id=draw.draw(st.sampled_from(["r1", "r2"]), label="run"),
        database_id=draw.draw(st.sampled_from(["db", "db-2"]), label="db"),
        kind=kind,
        version=VERSIONS[kind],
        member_index=draw.draw(st.integers(0, count - 1), label="index"),
        peers=peers,
        flags_json="{}",
        sample_interval_s=draw.draw(st.sampled_from([0.0, 0.2, 1.0]), label="interval"),
        cluster_token=f"fuzz-{count}",
    )


def valid_load(draw: st.DataObject) -> pb.LoadRequest:
    """A small load's plan, against a loopback port nothing listens on: the
    fuzzer makes the agent dial nothing else."""
    from dbtester.databases import get_kind
    from dbtester.databases.base import LoadSettings
    from dbtester.load import native
    from dbtester.workloads import workload_of

    kind = draw.draw(st.sampled_from(sorted(KINDS)), label="load kind")
    settings = LoadSettings(
        endpoints=(f"127.0.0.1:{_free_port()}",),
        client=get_kind(kind).client_model().model_dump(),
        key_size=8,
        value_size=16,
        consistency="linearizable",
        timeout_s=0.5,
        same_key=False,
    )
    requests = draw.draw(st.sampled_from([1, 5, 20]), label="load requests")
    workload = workload_of(
        type="write", requests=requests, clients=1, connections=1, key_size=8, value_size=16
    )
    plan = native.plan(kind, settings, workload)
    start = draw.draw(st.sampled_from([0.0, 0.2, -1.0]), label="start")
    return pb.LoadRequest(
        run_id="r1",
        database_id="db",
        plan_json=json.dumps(plan),
        start_unix=time.time() + start if start else 0.0,
    )


def flags_text(draw: st.DataObject) -> str:
    how = draw.draw(st.sampled_from(["json", "text", "deep", "number", "valid"]), label="flags")
    if how == "json":
        return json.dumps(draw.draw(hostile_values(["snapshot_count", "tick_time"]), label="v"))
    if how == "deep":
        depth = draw.draw(st.sampled_from([100, 10_000, 100_000]), label="depth")
        return "[" * depth + "]" * depth
    if how == "number":
        return "9" * draw.draw(st.sampled_from([10, 5000]), label="digits")
    if how == "valid":
        return draw.draw(
            st.sampled_from(['{"snapshot_count": 5}', '{"tick_time": 100}', '{"log_level": "x"}'])
        )
    return draw.draw(st.text(max_size=60), label="flags text")


def mutate_message(draw: st.DataObject, agent: Agent, message: Any) -> None:
    """Set 1..3 fields of ``message`` to arbitrary values of their type."""
    fields = message.DESCRIPTOR.fields
    if not fields:
        return
    text = strings(agent)
    for _ in range(draw.draw(st.integers(1, 3), label="fields")):
        name = draw.draw(st.sampled_from([f.name for f in fields]), label="field")
        described = message.DESCRIPTOR.fields_by_name[name]
        if name == "flags_json":
            message.flags_json = flags_text(draw)
        elif name == "peers":
            del message.peers[:]
            for _ in range(draw.draw(st.integers(0, 4), label="peers")):
                ports = draw.draw(
                    st.dictionaries(
                        st.sampled_from(["client", "peer", "election", "server"]) | text,
                        UINT32,
                        max_size=5,
                    ),
                    label="ports",
                )
                message.peers.add(name=draw.draw(text), host=draw.draw(text), ports=ports)
        elif described.type == described.TYPE_STRING:
            setattr(message, name, draw.draw(text, label=name))
        elif described.type == described.TYPE_UINT32:
            setattr(message, name, draw.draw(UINT32, label=name))
        elif described.type == described.TYPE_DOUBLE:
            setattr(message, name, draw.draw(DOUBLES, label=name))
        elif described.type == described.TYPE_BOOL:
            setattr(message, name, draw.draw(st.booleans(), label=name))


def member_request(draw: st.DataObject, agent: Agent, rpc: str) -> Any:
    """A Stop/ListFiles/FetchFile naming a member that exists, most of the time."""
    request = REQUESTS[rpc]()
    # Drawn the same way whatever has started, so that Hypothesis can replay it.
    use_known = not rarely(draw, "an unknown member", 4)
    which = draw.draw(st.integers(0, 7), label="which member")
    known = sorted(agent.started)
    if known and use_known:
        run_id, database_id, index = known[which % len(known)]
        request.run_id, request.database_id, request.member_index = run_id, database_id, index
    if rpc == "FetchFile":
        request.name = draw.draw(
            st.sampled_from(["metrics.csv", "database.log", "agent.log"]), label="file"
        )
    if rpc == "Stop":
        request.grace_s = 1.0
    return request


@dataclass
class Sent:
    rpc: str
    raw: bool
    message: bytes
    answer: Answer


def send_one(draw: st.DataObject, agent: Agent) -> Sent:
    rpc = draw.draw(st.sampled_from([*REQUESTS, "Health"]), label="rpc")
    how = draw.draw(st.sampled_from(["fields", "fields", "bytes", "mutated bytes"]), label="as")
    if rpc == "Health":
        typed: Any = health_pb2.HealthCheckRequest(service="")
    elif rpc == "Start":
        empty = rarely(draw, "empty request", 3)
        typed = pb.StartRequest() if empty else valid_start(draw)
    elif rpc in ("Stop", "ListFiles", "FetchFile"):
        typed = member_request(draw, agent, rpc)
    elif rpc == "Load":
        typed = pb.LoadRequest() if rarely(draw, "empty load", 3) else valid_load(draw)
    elif rpc == "StopLoad":
        typed = pb.StopLoadRequest(run_id="r1", database_id="db")
    else:
        typed = pb.StatusRequest()
    if how == "fields" and not rarely(draw, "as is", 4):
        mutate_message(draw, agent, typed)
    message = typed.SerializeToString()
    raw = how != "fields"
    if how == "bytes":
        message = draw.draw(st.binary(max_size=512), label="bytes")
    elif how == "mutated bytes":
        message = mutate_bytes(draw, message)
    metadata = "token"
    if rarely(draw, "other metadata", 5):
        metadata = draw.draw(st.sampled_from(["none", "wrong", "basic", "long"]), label="md")
    md = {
        "token": agent.metadata,
        "none": (),
        "wrong": (("authorization", "Bearer " + "0" * 32),),
        "basic": (("authorization", "Basic " + agent.token),),
        "long": (("authorization", "Bearer " + agent.token * 200),),
    }[metadata]
    method = None
    if rarely(draw, "odd method", 20):
        method = draw.draw(
            st.sampled_from([SERVICE + "Nope", "/grpc.health.v1.Health/Nope", "/x", SERVICE]),
            label="method",
        )
    answer = call(agent, rpc, message, md, method)
    if rpc == "Start" and answer.code == grpc.StatusCode.OK and not raw:
        start = pb.StartRequest.FromString(message)
        agent.started[(start.run_id, start.database_id, start.member_index)] = time.time()
    return Sent(rpc, raw, message, answer)


# ---------------------------------------------------------------------- what must hold


SAFE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
IN_DATA_ROOT = re.compile(rf"(agent\.log|(runs|failed)(/{SAFE}(/{SAFE}(/member-\d+(/.*)?)?)?)?)")


def check_answer(sent: Sent) -> None:
    allowed = set(ANSWERS)
    if sent.raw:
        allowed.add(grpc.StatusCode.INTERNAL)  # bytes that are not the message
    assert sent.answer.code in allowed, (
        f"{sent.rpc} answered {sent.answer.code.name}: {sent.answer.details!r}"
        f" (request {sent.message[:200]!r})"
    )
    if sent.answer.code == grpc.StatusCode.INTERNAL:
        assert "deserializ" in sent.answer.details.lower(), sent.answer.details
    if sent.answer.code == grpc.StatusCode.OK and sent.rpc in BOUNDS:
        try:
            request = REQUESTS[sent.rpc].FromString(sent.message)
        except Exception:  # bytes the agent read some other way
            return
        for name, (low, high) in BOUNDS[sent.rpc].items():
            value = getattr(request, name)
            assert value == 0 or (math.isfinite(value) and low <= value <= high), (
                f"{sent.rpc} accepted {name}={value!r}"
            )


def check_agent(agent: Agent) -> None:
    assert agent.process.poll() is None, f"the agent died:\n{agent.stderr.read_text()[-3000:]}"
    health = call(agent, "Health", b"")
    assert health.code == grpc.StatusCode.OK, f"Health: {health.code.name} {health.details}"
    assert health_pb2.HealthCheckResponse.FromString(health.reply).status == 1  # SERVING
    errors = agent.stderr.read_text(errors="replace")
    assert "Traceback" not in errors, errors[-3000:]
    _check_children(agent)
    _check_files(agent)
    if agent.trace is not None:
        _check_trace(agent)


def _check_children(agent: Agent) -> None:
    for child in psutil.Process(agent.process.pid).children():
        try:
            argv = child.cmdline()
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.NoSuchProcess:
            continue
        assert str(agent.binary) in argv[:2], f"the agent runs a process not allow-listed: {argv}"


def _check_files(agent: Agent) -> None:
    now = _snapshot(agent.sandbox, agent.data_root)
    expected = {str(agent.stderr)} | {str(p) for p in agent.sandbox.glob("trace/*")}
    appeared = now - agent.outside_before - expected
    assert not appeared, f"written outside the data root: {sorted(appeared)[:10]}"
    for dirpath, dirnames, filenames in os.walk(agent.data_root):
        for name in [*dirnames, *filenames]:
            rel = (Path(dirpath) / name).relative_to(agent.data_root).as_posix()
            assert IN_DATA_ROOT.fullmatch(rel), f"unexpected path in the data root: {rel!r}"


#: syscalls that create, change or remove a path, and where their paths are
_WRITES = re.compile(
    r"^(open|openat|creat|mkdir|mkdirat|rename|renameat|renameat2|unlink|unlinkat|rmdir"
    r"|symlink|symlinkat|link|linkat|truncate|chmod|fchmodat|chown|lchown|fchownat|mknod"
    r"|mknodat|utimensat|execve|execveat)\((.*)\)\s+=\s+(.*)$"
)
_ARG = re.compile(r'(?:(-?\d+|AT_FDCWD)<([^>]*)>|"((?:[^"\\]|\\.)*)")')


def _paths(syscall: str, args: str, cwd: str) -> list[str]:
    """The paths a traced call names, made absolute with the directory
    descriptors strace -y shows next to them."""
    base, found = cwd, []
    for match in _ARG.finditer(args):
        if match.group(2) is not None:  # a directory descriptor: the next path is in it
            base = match.group(2)
            continue
        name = match.group(3).encode().decode("unicode_escape", "replace")
        found.append(os.path.normpath(os.path.join(base, name)))
        base = cwd
    return found


def _check_trace(agent: Agent) -> None:
    assert agent.trace is not None
    allowed_root = str(agent.data_root) + os.sep
    cwd = str(agent.sandbox / "cwd")
    setpriv = shutil.which("setpriv") or "setpriv"
    runs = {str(agent.binary), os.path.realpath(setpriv), setpriv}
    for path in sorted(agent.trace.parent.iterdir()):
        text = path.read_text(errors="replace")
        seen = agent.trace_seen.get(path.name, 0)
        new = text[seen:]
        cut = new.rfind("\n") + 1  # only whole lines
        agent.trace_seen[path.name] = seen + cut
        for line in new[:cut].splitlines():
            match = _WRITES.match(line)
            if not match:
                continue
            syscall, args, result = match.groups()
            if syscall.startswith("execve"):
                if result.startswith("0"):
                    ran = _paths(syscall, args, cwd)[:1]
                    name = os.path.basename(ran[0]) if ran else "?"
                    # the stand-in runs `sleep`: what an allowed database runs is its own
                    assert ran and (ran[0] in runs or name == "sleep"), line
                continue
            if syscall.startswith("open") and not re.search(
                r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC", args
            ):
                continue
            for target in _paths(syscall, args, cwd):
                if target == "/dev/null" or target.startswith(allowed_root):
                    continue
                if target.startswith(("/proc/", "/sys/")) and "O_CREAT" not in args:
                    continue
                raise AssertionError(f"the agent wrote outside its data root: {line}")


# ---------------------------------------------------------------------- the harness


def cleanup(agent: Agent) -> None:
    """Stop whatever runs, so members do not pile up between examples."""
    status = call(agent, "Status", b"")
    if status.code != grpc.StatusCode.OK:
        return
    for member in pb.StatusResponse.FromString(status.reply).members:
        if member.state in ("running", "starting", "exited"):
            stop = pb.StopRequest(
                run_id=member.run_id,
                database_id=member.database_id,
                member_index=member.member_index,
                grace_s=1.0,
            )
            call(agent, "Stop", stop.SerializeToString())


def fresh(agent: Agent) -> None:
    """Nothing running and nothing in the data root: an example replays the
    same way when Hypothesis shrinks it, and what it leaves is its own."""
    cleanup(agent)
    agent.started.clear()
    for leftover in ("runs", "failed"):
        shutil.rmtree(agent.data_root / leftover, ignore_errors=True)
    agent.outside_before = _snapshot(agent.sandbox, agent.data_root)


def check_example(agent: Agent, draw: st.DataObject) -> None:
    fresh(agent)
    for _ in range(draw.draw(st.integers(1, 4), label="calls")):
        check_answer(send_one(draw, agent))
    check_agent(agent)


def _seeds() -> list[Path]:
    return sorted(CORPUS.glob("*.bin")) if CORPUS.exists() else []


@pytest.mark.parametrize("seed", _seeds(), ids=lambda p: p.name)
def test_seed_corpus(agent: Agent, seed: Path) -> None:
    """Each seed: ``<Rpc>.<what>.bin`` holds the bytes sent as that RPC's message."""
    rpc = seed.name.split(".", 1)[0]
    fresh(agent)
    check_answer(Sent(rpc, True, seed.read_bytes(), call(agent, rpc, seed.read_bytes())))
    check_agent(agent)


def test_fuzz_agent(agent: Agent) -> None:
    fuzz("agent", st.data(), lambda draw: check_example(agent, draw), budget())
    cleanup(agent)
    check_agent(agent)
