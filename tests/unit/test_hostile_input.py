"""Every crash the fuzz harnesses (tests/fuzz) or their review found, with its
minimal input: a test case, a results directory, an agent request or an argv
that once ended in a traceback, a hang, a runaway allocation or a write out of
place, and now gets a one-line answer and exit 2 (an INVALID_ARGUMENT status,
for the agent)."""

from __future__ import annotations

import io
import math
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from dbtester.agent.config import AgentConfig
from dbtester.agent.service import AgentService
from dbtester.agent.start import check_numbers
from dbtester.config import load_test_case
from dbtester.config.source import MAX_BYTES, MAX_DEPTH, MAX_NODES
from dbtester.errors import ConfigError, ResultsError
from dbtester.proto import agent_pb2 as pb
from dbtester.results import ResultsDir
from tests.conftest import CONFIGS, LEGACY, ROOT

# ---------------------------------------------------------------------- test cases

GOOD = (CONFIGS / "quickstart.yaml").read_text()


def billion_laughs() -> str:
    """The issue's input: nine levels of nine aliases (9**9 'lol's once expanded)."""
    lines = [
        "title: laughs",
        "workload: {type: write, requests: 10}",
        "databases: [{id: a, kind: etcd, version: 3.5.17}]",
        'lol0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    for level in range(1, 9):
        aliases = ",".join([f"*l{level - 1}"] * 9)
        lines.append(f"lol{level}: &l{level} [{aliases}]")
    lines.append("description: *l8")
    return "\n".join(lines) + "\n"


LEGACY_CASE = """\
test_title: t
all_database_id_list: [etcd__v3_5]
datatbase_id_to_config_client_machine_agent_control:
  etcd__v3_5:
    database_description: etcd v3.5.17
    peer_ips: [10.0.0.1]
    benchmark_options: {type: write, request_number: 10, connection_number: 1, client_number: 1}
"""

# (name, file content, "line:col" of the one problem, a fragment of its message)
CASES: list[tuple[str, str | bytes, str, str]] = [
    # the issue's four
    ("self-referencing alias", "x: &a {y: *a}\n", "1:4", "anchors and aliases are not supported"),
    ("billion laughs", billion_laughs(), "4:7", "anchors and aliases are not supported (82 in"),
    ("deep flow sequence", "x: " + "[" * 3000 + "]" * 3000 + "\n", "1:67", "nested more than 64"),
    ("deep flow mapping", "x: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", "1:256", "nested"),
    ("unknown tag", "!tag z: 1\n", "1:1", "unknown YAML tag '!tag'"),
    # found since: each once a ValueError, TypeError, IndexError or ConstructorError traceback
    ("impossible date", "title: 2001-13-45\n", "1:8", "as a date: month must be in 1..12"),
    ("4400-digit number", "title: " + "9" * 4400 + "\n", "1:8", "4,400 digits is too many"),
    ("explicit int tag on text", "title: !!int abc\n", "1:8", "cannot read 'abc' as a whole"),
    ("explicit float tag, no value", "title: !!float\n", "1:8", "cannot read '' as a number"),
    ("unhashable complex key", "? {[a]: 1}\n: x\n", "1:3", "keys must be strings, not a mapping"),
    ("%TAG directive", "%TAG ! tag:x.org,2000:\n---\n!foo a: 1\n", "3:1", "unknown YAML tag"),
    ("control character", "title: t\x1f\n", "1:9", "character #x001f is not allowed"),
    ("surrogate escape in a key", '"\\ud800": 1\n', "1:1", "half of a UTF-16 pair"),
    (
        "legacy: a null database id",
        LEGACY_CASE.replace("[etcd__v3_5]", "[etcd__v3_5, null]"),
        "2:36",
        "expected a database id such as etcd__v3_5, got None",
    ),
    (
        "legacy: flags block not a mapping",
        LEGACY_CASE.replace("    peer_ips", "    etcd__v3_5: [1, 2]\n    peer_ips"),
        "6:17",
        "expected a mapping of keys",
    ),
    ("multiple documents", "a: 1\n---\nb: 2\n", "2:1", "expected a single document"),
    ("not UTF-8 (line 2)", b"a: 1\nb: x\xff\n", "2:5", "not UTF-8 text"),
]


@pytest.mark.parametrize(
    ("text", "where", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_hostile_test_case(
    tmp_path: Path, run_cli: Any, text: str | bytes, where: str, needle: str
) -> None:
    path = tmp_path / "case.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    result = run_cli("validate", str(path))
    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    assert result.err.startswith(f"dbtester: error: {path}:{where}: "), result.err
    assert needle in result.err
    assert result.err.count("\n") == 1  # one problem, one line


def test_legacy_convert_with_a_surrogate_key(tmp_path: Path, run_cli: Any) -> None:
    """Once a UnicodeEncodeError writing the conversion notes into NEW."""
    old = tmp_path / "old.yaml"
    text = (LEGACY / "write-one-client.yaml").read_text()
    old.write_text(text.replace("      snap_count:", '      "\\ud800x": 1\n      snap_count:'))
    result = run_cli("convert", str(old), str(tmp_path / "new.yaml"))
    assert result.code == 2 and "half of a UTF-16 pair" in result.err, result.err
    assert not (tmp_path / "new.yaml").exists()


def test_a_key_with_a_newline_is_shown_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "case.yaml"
    path.write_text(GOOD + '"a\\nb": 1\n')
    with pytest.raises(ConfigError) as caught:
        load_test_case(path)
    assert [p.message for p in caught.value.problems] == [
        "unknown key 'a\\nb' (allowed here:"
        " title, description, workload, databases, repeat, interleave, slice_s, max_trials,"
        " time_budget, equivalence, stopping_metrics, faults, fault_recovery, search,"
        " load_hosts, publish)"
    ]


def test_bounds(tmp_path: Path) -> None:
    path = tmp_path / "case.yaml"
    path.write_text("# " + "x" * MAX_BYTES + "\n")
    with pytest.raises(ConfigError, match="larger than 1024 KB"):
        load_test_case(path)
    path.write_text("x: [" + "0," * (MAX_NODES + 1) + "]\n")
    with pytest.raises(ConfigError, match="more than 20,000 values"):
        load_test_case(path)
    path.write_text("x: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n")  # 65 levels with x's map
    with pytest.raises(ConfigError, match="nested more than 64 levels"):
        load_test_case(path)
    path.write_text("x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n")
    with pytest.raises(ConfigError, match="missing required key"):  # deep enough is fine
        load_test_case(path)


def test_many_problems_are_listed_with_a_bound(tmp_path: Path) -> None:
    path = tmp_path / "case.yaml"
    path.write_text("".join(f"k{i}: !t{i} x\n" for i in range(100)))
    with pytest.raises(ConfigError) as caught:
        load_test_case(path)
    assert len(caught.value.problems) == 100
    lines = str(caught.value).splitlines()
    assert lines[0] == "100 errors in test case:" and lines[-1] == "  ... and 75 more"


#: The child caps its own data segment before dbtester is imported, records its
#: peak RSS (VmHWM, this process image's high-water mark) when it exits, and
#: runs ``python -m dbtester``. A preexec_fn would run Python between fork and
#: exec in a test process that may hold other threads' locks; and ru_maxrss
#: from wait4 or RUSAGE_CHILDREN would count the test process's own ~120 MB,
#: which the child shares until it executes Python.
CAPPED = """
import atexit, resource, runpy, sys
limit, report = int(sys.argv.pop(1)), sys.argv.pop(1)
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
def peak():
    with open("/proc/self/status") as status, open(report, "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM:")))
atexit.register(peak)
runpy.run_module("dbtester", run_name="__main__", alter_sys=True)
"""


def _validate_in_a_child(path: Path, scratch: Path) -> tuple[int, str, float]:
    """``python -m dbtester validate PATH`` as a child: exit code, stderr and its
    peak resident memory in MB.

    Plain ``validate configs/quickstart.yaml`` already needs about 211 MB of
    address space and 130 MB of RLIMIT_DATA (measured on the 2-core development
    machine: imports, thread stacks, libraries), so a 100 MB RLIMIT_AS could not
    tell input from interpreter. The child gets RLIMIT_DATA = 512 MB (enough to
    start, small enough that a runaway allocation ends in MemoryError at once
    instead of eating the machine), and what it used is its peak RSS: plain
    validate peaks at about 84 MB.
    """
    limit, report = 512 * 1024 * 1024, scratch / "peak"
    argv = [sys.executable, "-c", CAPPED, str(limit), str(report), "validate", str(path)]
    with (scratch / "stderr").open("w+") as err:
        child = subprocess.run(argv, check=False, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
        code = child.returncode
        err.seek(0)
        peak_kb = int(report.read_text().split()[1])
        return code, err.read(), peak_kb / 1024


def test_the_issue_inputs_stay_small(tmp_path: Path) -> None:
    plain_code, _, plain_mb = _validate_in_a_child(CONFIGS / "quickstart.yaml", tmp_path)
    assert plain_code == 0
    for name, text in (("self.yaml", "x: &a {y: *a}\n"), ("laughs.yaml", billion_laughs())):
        path = tmp_path / name
        path.write_text(text)
        code, err, peak_mb = _validate_in_a_child(path, tmp_path)
        assert code == 2, err
        assert err.count("\n") == 1 and "anchors and aliases are not supported" in err, err
        assert peak_mb < 100, f"{name}: peak RSS {peak_mb:.0f} MB (plain validate {plain_mb:.0f})"
        assert peak_mb < plain_mb + 10, f"{name}: {peak_mb:.0f} MB vs plain {plain_mb:.0f} MB"


# ---------------------------------------------------------------------- the command line


def test_agent_serve_with_an_empty_pidfile(tmp_path: Path, run_cli: Any, monkeypatch: Any) -> None:
    import dbtester.agent

    def never(*args: object) -> None:
        raise AssertionError("the agent would serve")

    monkeypatch.setattr(dbtester.agent, "serve", never)
    result = run_cli("agent", "serve", "--pidfile", "", "--data-root", str(tmp_path / "data"))
    assert result.code == 2 and "pidfile" in result.err, result.err


def test_convert_onto_a_full_disk(run_cli: Any) -> None:
    result = run_cli("convert", str(CONFIGS / "quickstart.yaml"), "/dev/full", "--force")
    assert result.code in (1, 2) and "/dev/full" in result.err, result.err


# ---------------------------------------------------------------------- results directories

V1 = ROOT / "tests" / "fixtures" / "results-v1"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return Path(shutil.copytree(V1, tmp_path / "run"))


def _npz(**changes: Any) -> bytes:
    with np.load(V1 / "etcd-v3.5" / "client-latency.npz") as data:
        arrays = {k: data[k] for k in data.files}
    arrays.update(changes)
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def _forged_npz() -> bytes:
    """due_ns's header declares 2**40 values (8 TiB) over 8 bytes of data."""
    header = "{'descr': '<i8', 'fortran_order': False, 'shape': (1099511627776,), }"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    member = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(8)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive, np.load(V1 / "etcd-v3.5/client-latency.npz") as d:
        for name in d.files:
            if name == "due_ns":
                archive.writestr("due_ns.npy", member)
            else:
                one = io.BytesIO()
                np.save(one, d[name])
                archive.writestr(f"{name}.npy", one.getvalue())
    return out.getvalue()


def _corrupt_deflate() -> bytes:
    out = io.BytesIO()
    with np.load(V1 / "etcd-v3.5" / "client-latency.npz") as data:
        np.savez_compressed(out, **{k: data[k] for k in data.files})
    blob = bytearray(out.getvalue())
    blob[60] ^= 0xFF
    return bytes(blob)


CONFIG = (V1 / "config.yaml").read_text()
LAUGHS_TITLE = billion_laughs().replace("description: *l8", "").replace("title: laughs\n", "")

# (name, file, new content, what the message says); each once a traceback or a hang
BROKEN: list[tuple[str, str, bytes | str, str]] = [
    ("bool tag on a key", "config.yaml", "!!bool " + CONFIG, "YAML tags are not dbtester's"),
    ("timestamp tag", "config.yaml", "title: !!timestamp x\n", "YAML tags are not dbtester's"),
    ("impossible date", "config.yaml", "title: 2001-13-45\ndatabases: []\n", "not valid YAML"),
    ("aliases printed as title", "config.yaml", LAUGHS_TITLE + "title: *l8\n", "anchors"),
    ("deep nesting", "config.yaml", "title: " + "[" * 3000 + "]" * 3000 + "\n", "nested too"),
    (
        "id out of the dir",
        "config.yaml",
        CONFIG.replace("- id: etcd-v3.5", "- id: ../x"),
        "not an id",
    ),
    ("surrogate title", "config.yaml", 'title: "\\ud800"\ndatabases: []\n', "half of a UTF-16"),
    ("5000-digit number", "etcd-v3.5/run.json", '{"schema": ' + "9" * 5000 + "}", "not valid JSON"),
    ("forged npy header", "etcd-v3.5/client-latency.npz", _forged_npz(), "declares 8,796,093"),
    ("0-d array", "etcd-v3.5/client-latency.npz", _npz(step=np.array(1, np.uint16)), "not a list"),
    (
        "0-d outcome table",
        "etcd-v3.5/client-latency.npz",
        _npz(codes=np.array("ok")),
        "table is not",
    ),
    (
        "corrupt deflate",
        "etcd-v3.5/client-latency.npz",
        _corrupt_deflate(),
        "cannot read the records",
    ),
    (
        "surrogate outcome",
        "etcd-v3.5/client-latency.npz",
        _npz(codes=np.array(["ok", "\ud800"])),
        "half",
    ),
]


@pytest.mark.parametrize(
    ("rel", "content", "needle"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN]
)
def test_broken_results_file_is_named(
    run: Path, run_cli: Any, rel: str, content: Any, needle: str
) -> None:
    path = run / rel
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, errors="surrogatepass")
    with pytest.raises(ResultsError) as caught:
        ResultsDir(run).load()
    assert caught.value.path == path and needle in str(caught.value), caught.value
    result = run_cli("analyze", str(run))
    assert result.code == 2 and result.err == f"dbtester: error: {caught.value}\n", result.err


@pytest.fixture
def alarm() -> Iterator[None]:
    """A read that blocks fails the test instead of hanging it."""
    import signal

    def timeout(*_: object) -> None:
        raise TimeoutError("the reader blocked")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("rel", ["etcd-v3.5/run.json", "etcd-v3.5/client-latency.npz"])
def test_a_fifo_is_not_read(run: Path, alarm: None, rel: str) -> None:
    """Once blocked forever in open()."""
    (run / rel).unlink()
    os.mkfifo(run / rel)
    with pytest.raises(ResultsError, match="not a regular file"):
        ResultsDir(run).load()


def test_a_directory_where_the_metrics_should_be(run: Path) -> None:
    """Once an IsADirectoryError traceback."""
    (run / "etcd-v3.5/client-metrics.csv").unlink()
    (run / "etcd-v3.5/client-metrics.csv").mkdir()
    with pytest.raises(ResultsError, match=r"client-metrics\.csv: not a regular file"):
        ResultsDir(run).load()


@pytest.mark.parametrize(("column", "cell"), [("rss_bytes", "inf"), ("cpu_percent", "")])
def test_metrics_that_are_not_finite_numbers(run: Path, column: str, cell: str) -> None:
    """Found by the results harness: an infinite rss_bytes reached int() in the
    analysis (OverflowError); an empty cell, NaN, would have too (ValueError)."""
    path = run / "etcd-v3.5/server-0-metrics.csv"
    lines = path.read_text().splitlines()
    at = lines[0].split(",").index(column)
    cells = lines[1].split(",")
    cells[at] = cell
    path.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    with pytest.raises(ResultsError, match=rf"server-0-metrics\.csv: column {column} holds a"):
        ResultsDir(run).load()


def test_a_device_is_not_read(run: Path, alarm: None) -> None:
    (run / "etcd-v3.5/run.json").unlink()
    (run / "etcd-v3.5/run.json").symlink_to("/dev/zero")
    with pytest.raises(ResultsError, match="not a regular file"):
        ResultsDir(run).load()


# ---------------------------------------------------------------------- agent requests


class AbortedError(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code


class Context:
    """What a handler gets from gRPC, enough for the refusals."""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise AbortedError(code, details)

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[AgentService]:
    # allow-listed but absent: should a refusal ever give way, nothing runs
    nowhere = str(tmp_path / "no-such-etcd")
    config = AgentConfig(
        data_root=tmp_path / "data", binaries={"etcd": {"3.5.17": {"etcd": nowhere}}}
    )
    running = AgentService(config)
    yield running
    running.close()


def _start(**changes: Any) -> pb.StartRequest:
    request = pb.StartRequest(
        run_id="r1",
        database_id="db",
        kind="etcd",
        version="3.5.17",
        member_index=0,
        peers=[pb.Peer(name="m0", host="127.0.0.1", ports={"client": 1, "peer": 2})],
        flags_json="{}",
    )
    for name, value in changes.items():
        if name == "host":
            request.peers[0].host = value
        elif name == "peer_name":
            request.peers[0].name = value
        else:
            setattr(request, name, value)
    return request


def _refused(call: Any, request: Any) -> str:
    with pytest.raises(AbortedError) as caught:
        call(request, Context())
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT, caught.value
    return str(caught.value)


@pytest.mark.parametrize(
    "changes",
    [
        # a trailing newline passed re.match(r"...$"): a member directory 'runs/r1\n'
        {"run_id": "r1\n"},
        {"database_id": "db\n"},
        {"version": "3.5.17\n"},
        {"host": "127.0.0.1\n"},
        {"peer_name": "m0\n"},
        # once UNKNOWN: a RecursionError, and ValueError('embedded null byte') from Popen
        {"flags_json": "[" * 5000 + "]" * 5000},
        {"cluster_token": "a\x00b"},
        # once accepted: a sampler that spins (a core busy, metrics.csv without end)
        {"sample_interval_s": math.nan},
        {"sample_interval_s": -1.0},
        {"sample_interval_s": 1e-9},
        {"sample_interval_s": math.inf},
        # ... and a watchdog that never fires, or whose timeout is no number
        {"heartbeat_timeout_s": math.inf},
        {"heartbeat_timeout_s": math.nan},
        {"heartbeat_timeout_s": -1.0},
    ],
    ids=repr,
)
def test_start_refuses(service: AgentService, changes: dict[str, Any]) -> None:
    message = _refused(service.Start, _start(**changes))
    assert "\n" not in message
    assert not (service.config.data_root / "runs").exists()


@pytest.mark.parametrize("grace", [math.nan, math.inf, -1.0, 601.0])
def test_stop_refuses_a_grace_period_that_is_not_one(service: AgentService, grace: float) -> None:
    """Once accepted: Stop waiting forever on a database that ignores SIGTERM."""
    _refused(service.Stop, pb.StopRequest(run_id="r1", database_id="db", grace_s=grace))


def test_ordinary_numbers_pass(service: AgentService) -> None:
    for interval, heartbeat in ((0.0, 0.0), (0.1, 0.1), (1.0, 60.0), (60.0, 86_400.0)):
        request = _start(sample_interval_s=interval, heartbeat_timeout_s=heartbeat)
        check_numbers(request)
    with pytest.raises(AbortedError) as caught:
        service.Stop(pb.StopRequest(run_id="r1", database_id="db", grace_s=2.0), Context())  # type: ignore[arg-type]
    assert caught.value.code == grpc.StatusCode.NOT_FOUND


def test_names_in_errors_are_cut_short(service: AgentService) -> None:
    message = _refused(service.Start, _start(run_id="r" * 100_000))
    assert len(message) < 300


# ---------------------------------------------------------------------- the engine's plan


def _engine_plan(**changes: Any) -> dict[str, Any]:
    from dbtester.databases.base import LoadSettings
    from dbtester.load.native import plan
    from dbtester.workloads import workload_of

    workload = workload_of(type="write", requests=10, key_size=8, clients=2, connections=1)
    settings = LoadSettings(("127.0.0.1:1",), {"balancer": "leader"}, 8, 16, "linearizable", 1.0)
    return {**plan("etcd", settings, workload), **changes}


def test_a_plan_that_holds_itself_is_refused_not_a_crash() -> None:
    """Found by the engine harness: converting it recursed until the stack
    ended (a segmentation fault that took the controller with it)."""
    from dbtester import _engine

    value = _engine_plan()
    value["steps"].append(value["steps"])
    with pytest.raises(ValueError, match=r"nested more than 8 levels deep"):
        _engine.start(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # two billion clients were accepted and each one spawned a task
        (
            {"steps": [{"clients": 2**31, "connections": 1, "requests": 3, "rate": 0.0}]},
            r"clients.*from 1 to 1048576",
        ),
        # a random order of 2**32 keys was built (16 GB) even for 10 requests
        (
            {
                "keys": {
                    "existing": 0,
                    "first": 0,
                    "choose": "same",
                    "inserts": "permuted",
                    "insert_space": 2**32,
                    "zipfian_constant": 0.99,
                    "hot_set_fraction": 0.2,
                    "hot_operation_fraction": 0.8,
                },
                "key_size": 16,
            },
            r"at most 268435456",
        ),
    ],
)
def test_engine_plans_that_would_allocate_without_bound(
    changes: dict[str, Any], message: str
) -> None:
    from dbtester import _engine

    with pytest.raises(ValueError, match=message):
        _engine.start(_engine_plan(**changes))  # type: ignore[arg-type]


def test_a_test_case_too_big_for_memory_is_refused_when_validated(tmp_path: Path) -> None:
    """Ten billion requests passed validation and failed once the databases
    were up (the engine reserves 27 bytes of records per request)."""
    case = GOOD.replace("requests: ", "requests: 10000000000 #", 1)
    assert case != GOOD
    path = tmp_path / "big.yaml"
    path.write_text(case)
    with pytest.raises(ConfigError, match=r"requests.*1000000000"):
        load_test_case(path)


def test_keys_a_workload_type_ignores_are_not_kept(tmp_path: Path) -> None:
    """Found by the loader harness (a legacy case with two lines swapped): a
    read's `same_key: true` was warned as ignored but kept, so what `convert`
    wrote back (without it) loaded as a different test case."""
    import yaml

    from dbtester.config.load import load_test_case_text

    case = GOOD.replace("  type: write", "  type: read\n  same_key: true").replace(
        "  sequential_keys: true", "  sequential_keys: false"
    )
    assert case != GOOD
    path = tmp_path / "read.yaml"
    path.write_text(case)
    loaded = load_test_case(path)
    workload = loaded.case.workload
    assert {"same_key", "sequential_keys"}.isdisjoint(workload.model_dump())  # not kept
    messages = [w.message for w in loaded.warnings]
    assert "'same_key' applies to write workloads only; ignored for reads" in messages
    again = load_test_case_text(yaml.safe_dump(loaded.case.to_raw()), "again")
    assert again.case == loaded.case
    # a write's consistency likewise, and a bad value is still an error
    path.write_text(GOOD.replace("  type: write", "  type: write\n  consistency: serializable"))
    warned = [w.message for w in load_test_case(path).warnings]
    assert "'consistency' applies to read and mixed workloads only; ignored for writes" in warned
    path.write_text(GOOD.replace("  type: write", "  type: write\n  consistency: strong"))
    with pytest.raises(ConfigError, match="strong"):
        load_test_case(path)


def test_a_repeated_metrics_column_holding_text_is_not_analysed(
    tmp_path: Path, run_cli: Any
) -> None:
    """Found by the results harness: a server CSV with a column repeated by
    hand, holding text (pandas keeps it as NAME.1), reached the analysis and
    ended `dbtester analyze` in a traceback ("could not convert string to
    float"). Only the columns dbtester checked are analysed."""
    run = Path(shutil.copytree(V1, tmp_path / "run"))
    csv_path = run / "etcd-v3.5" / "server-1-metrics.csv"
    lines = csv_path.read_text().splitlines()
    lines[0] += ",threads"
    lines[1:] = [line + ",&a 62" for line in lines[1:]]
    csv_path.write_text("\n".join(lines) + "\n")
    result = run_cli("analyze", str(run))
    assert "Traceback" not in result.err
    assert result.code == 0, result.err
