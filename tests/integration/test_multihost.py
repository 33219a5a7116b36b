"""Several machines on one: network namespaces on a private /24, sshd on each
server host, ``dbtester agents up`` over SSH, and a run from the client host
against a 3-member etcd cluster spread over the three servers.

Runs as root (CI does); skips with the reason elsewhere. The namespaces and
every process in them are removed at the end, also when a test fails.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.integration.netns import Topology, cannot_make_namespaces
from tests.support.cases import database, fast_elections, make_case, write_case
from tests.support.cluster import NATS, VERSIONS
from tests.support.poll import poll_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(bool(reason := cannot_make_namespaces()), reason=reason or ""),
]

ETCD = "3.5.17"
Done = subprocess.CompletedProcess[str]


@dataclass
class Lab:
    topology: Topology
    root: Path
    key: Path
    known_hosts: Path
    config: Path
    env: dict[str, str]

    def dbtester(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """``dbtester ARGS`` on the client host (the controller's machine); the
        time it took is printed (pytest -s shows it)."""
        started = time.monotonic()
        try:
            return self._dbtester(args, timeout)
        finally:
            print(f"dbtester {' '.join(args[:2])}: {time.monotonic() - started:.1f} s")

    def _dbtester(self, args: tuple[str, ...], timeout: float) -> subprocess.CompletedProcess[str]:
        where = self.topology.client
        return subprocess.run(
            where.exec_argv([sys.executable, "-m", "dbtester", *args]),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )

    def ssh_args(self, known_hosts: Path | None = None) -> list[str]:
        return ["-i", str(self.key), "--known-hosts", str(known_hosts or self.known_hosts)]


def _write_case(path: Path, topology: Topology, root: Path, **host_extra: object) -> None:
    hosts = [
        {
            "address": h.address,
            "ssh_user": "root",
            "agent_dir": str(root / "agents" / h.name),
            **host_extra,
        }
        for h in topology.server_hosts
    ]
    case = make_case(
        title="Multi-host smoke test",
        workload={"requests": 3000, "key_size": 16, "clients": 30, "connections": 6},
        databases=[database("etcd-3hosts", version=ETCD, hosts=hosts)],
    )
    write_case(path, case)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, shared_home: Path) -> Iterator[Lab]:
    from dbtester.databases import get_kind
    from dbtester.remote import build_wheelhouse
    from dbtester.util.progress import Reporter

    root = tmp_path_factory.mktemp("lab")
    env = dict(os.environ)
    env["DBTESTER_HOME"] = str(shared_home)
    env["DBTESTER_AGENT_TOKEN_FILE"] = str(root / "controller" / "agent.token")
    env.pop("DBTESTER_AGENT_TOKEN", None)
    # The client host has no route to PyPI or the Go proxy: fill the caches the
    # controller copies from here first (what a user's controller has after its
    # first `agents up`).
    previous = os.environ.get("DBTESTER_HOME")
    os.environ["DBTESTER_HOME"] = str(shared_home)
    try:
        get_kind("etcd").install(ETCD, Reporter())
        for kind in ("zookeeper", "consul"):
            get_kind(kind).install(VERSIONS[kind], Reporter())
        get_kind("nats").install(NATS, Reporter())
        build_wheelhouse(say=lambda _m: None)
    finally:
        if previous is None:
            del os.environ["DBTESTER_HOME"]
        else:
            os.environ["DBTESTER_HOME"] = previous
    key = root / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    authorized = root / "authorized_keys"
    authorized.write_text(Path(f"{key}.pub").read_text())
    with Topology(root / "hosts", loaders=2) as topology:
        topology.start_sshd(authorized)
        known = root / "known_hosts"
        known.write_text("".join(topology.known_hosts_line(h) for h in topology.ssh_hosts))
        config = root / "multihost.yaml"
        _write_case(config, topology, root)
        yield Lab(topology, root, key, known, config, env)
        # Best effort; Topology.close() kills whatever is left either way.
        down = ["agents", "down", str(config), "-i", str(key), "--known-hosts", str(known)]
        subprocess.run(
            topology.client.exec_argv([sys.executable, "-m", "dbtester", *down]),
            capture_output=True,
            env=env,
            timeout=300,
            check=False,
        )


@pytest.fixture(scope="module")
def agents_up(lab: Lab) -> Done:
    """The first ``agents up`` of the module (the slow one: it installs the
    agents), shared: the run that isolates a member goes before
    test_agents_up_run_and_down, which checks this first up and brings them down."""
    # --no-systemd: on a machine whose init is systemd, the three "hosts" would
    # otherwise share one unit in the real /etc/systemd/system.
    return lab.dbtester("agents", "up", str(lab.config), *lab.ssh_args(), "--no-systemd")


def _agents_up(lab: Lab, case: dict[str, Any], name: str) -> tuple[Path, Done]:
    """``dbtester agents up`` for ``case`` (saved as NAME.yaml), which must
    pass: its config file and the result."""
    config = lab.root / f"{name}.yaml"
    config.write_text(yaml.safe_dump(case, sort_keys=False))
    up = lab.dbtester("agents", "up", str(config), *lab.ssh_args(), "--no-systemd")
    assert up.returncode == 0, up.stderr[-3000:] + up.stdout[-3000:]
    return config, up


def _run_case(lab: Lab, case: dict[str, Any], name: str) -> Path:
    """``dbtester run`` of ``case`` (saved as NAME.yaml), which must pass; its
    results directory."""
    config = lab.root / f"{name}.yaml"
    config.write_text(yaml.safe_dump(case, sort_keys=False))
    out = lab.root / f"{name}-results"
    run = lab.dbtester("run", "--no-charts", str(config), "--out", str(out))
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    return out


def test_isolating_the_leader_and_healing_it(lab: Lab, agents_up: Done) -> None:
    """``isolate`` cuts the leader's host off (an nftables table its agent adds,
    which keeps the agent reachable); the other two elect a new leader, writes
    stall meanwhile, none acknowledged is lost, and 8 checked clients'
    history stays linearizable; ``heal`` lets it back, and no table is left
    on any host."""
    assert agents_up.returncode == 0, agents_up.stderr + agents_up.stdout
    case = yaml.safe_load(lab.config.read_text())
    # Open loop: requests stay due while the cluster has no leader, so the
    # stall shows in the records rather than slowing the load down.
    case["workload"].update(requests=12_000, rate=1_500, clients=200, connections=6)
    case["workload"]["check"] = {"clients": 8, "keys": 8}
    case["faults"] = [
        {"at": "2s", "action": "isolate", "member": "leader"},
        {"at": "5s", "action": "heal"},
    ]
    out = _run_case(lab, case, "isolate")

    record = json.loads((out / "etcd-3hosts" / "run.json").read_text())
    assert record["verification"]["lost"] == 0, record["verification"]
    correctness = record["correctness"]
    assert correctness["violation"] is None and correctness["linearizable_keys"] == 8
    print(f"isolate: {correctness['operations']:,} checked operations, linearizable")
    isolated, healed = record["faults"]
    assert (isolated["action"], isolated["target"], healed["action"]) == (
        "isolate",
        "leader",
        "heal",
    )
    assert healed["member"] == isolated["member"] and not isolated["error"] + healed["error"]
    load = record["load"]
    assert load["started_unix"] < isolated["unix"] < healed["unix"] < load["ended_unix"]
    # causal: the next leader is named after the isolation was asked for
    assert isolated["new_leader_s"] is not None and isolated["new_leader_s"] > 0
    print(f"isolate: a new leader {isolated['new_leader_s']:.2f} s later; {load['counts']}")

    # Successful completions stop for a while at the isolation (no leader until
    # the other two elect one). The stall is the widest gap between two of
    # them that ends after the isolation (on the controller's clock within
    # half the offset probe's round trip, as the record's time is promised)
    # and begins before the heal. Causally, no write commits from the
    # isolation until a new leader is elected, and etcd's followers elect
    # only after its election timeout (1 s) without the leader's heartbeat
    # (every 100 ms): a stall of 0.9 s at least on any machine, so 0.3 s is
    # no question of the machine's speed. It begins before the new leader
    # was named (causal: only replies to writes committed before the
    # isolation can arrive in between); where exactly is printed, not judged.
    with np.load(out / "etcd-3hosts" / "client-latency.npz") as records:
        ok = records["code"] == 0
        done = np.sort(records["due_ns"][ok] + records["latency_ns"][ok]) / 1e9
    starts, widths = done[:-1], np.diff(done)
    (member,) = [m for m in record["members"] if m["index"] == isolated["member"]]
    at, error = isolated["unix"], member["clock_rtt_s"] / 2
    candidates = (starts + widths >= at - error) & (starts < healed["unix"])
    widest = int(np.argmax(np.where(candidates, widths, 0.0)))
    began = starts[widest] - at
    print(f"isolate: completions stopped {widths[widest]:.2f} s from {began:+.2f} s after it")
    assert widths[widest] > 0.3, (widths[widest], began)
    assert began < isolated["new_leader_s"] + error, (began, isolated["new_leader_s"])
    # ...and the run reports that window: no longer than the records' longest
    # stretch without a success from the isolation on
    (figures,) = json.loads((out / "result.json").read_text())["databases"][0]["faults"]
    assert (figures["action"], figures["undo"], figures["member"]) == (
        "isolate",
        "heal",
        isolated["member"],
    )
    # exact but for the figure's rounding to the ms: the run's window is a gap
    # among these successes, after the isolation; above 0.3 s as the stall is
    longest = widths[starts > isolated["unix"] - 1.0].max()
    assert 0.3 < figures["unavailable_s"] <= longest + 1e-3
    table = (out / "summary.txt").read_text()
    assert "isolate leader at 2 s, heal at 5 s" in table and "FAULT-1-UNAVAILABLE-SECONDS" in table
    print(f"isolate: reported unavailable {figures['unavailable_s']:.2f} s")

    # The isolated member's agent made the firewall table and deleted it...
    said = (out / "etcd-3hosts" / f"server-{isolated['member']}-agent.log").read_text()
    assert "isolated (scheduled fault): nftables table inet dbtester_isolate_3500_" in said
    assert "healed (scheduled fault)" in said
    # ...and none is left on any host.
    for host in lab.topology.server_hosts:
        tables = host.run(["nft", "list", "tables"], check=True).stdout
        assert "dbtester_isolate" not in tables, (host.name, tables)


def test_zookeeper_and_consul_stay_linearizable_through_a_leader_isolation(
    lab: Lab, agents_up: Done
) -> None:
    """The leader of a 3-host ZooKeeper and of a 3-host Consul isolated for
    3 s under writes: 8 checked clients' history checks linearizable on
    Consul, and no acknowledged write is lost on either. ZooKeeper's reads
    sync first, but its sync is not a quorum operation (ZOOKEEPER-1675) and
    its reads are not promised to be linearizable: two runs under a busy
    machine found a stale read there 1 s into the load, before the fault.
    Its violation, when there is one, is reported with the two writes."""
    assert agents_up.returncode == 0, agents_up.stderr + agents_up.stdout
    case = yaml.safe_load(lab.config.read_text())
    hosts = case["databases"][0]["hosts"]
    case["databases"] = [
        # each its own copy: yaml.safe_dump writes a shared list as an alias
        database(f"{kind}-3hosts", kind, hosts=[*map(dict, hosts)], **fast_elections(kind))
        for kind in ("zookeeper", "consul")
    ]
    case["workload"].update(
        requests=6_000,
        rate=1_000,
        clients=60,
        connections=6,
        request_timeout_s=2.0,
        check={"clients": 8, "keys": 8, "on_violation": "report"},
    )
    case["faults"] = [
        {"at": "2s", "action": "isolate", "member": "leader"},
        {"at": "5s", "action": "heal"},
    ]
    # the agents running already get these two kinds installed (and go on)
    _agents_up(lab, case, "isolate-zk-consul")
    out = _run_case(lab, case, "isolate-zk-consul")
    for db in case["databases"]:
        record = json.loads((out / db["id"] / "run.json").read_text())
        correctness = record["correctness"]
        print(
            f"isolate {db['kind']}: {correctness['operations']:,} checked operations,"
            f" new leader after {record['faults'][0]['new_leader_s']} s"
        )
        assert correctness["operations"] > 0
        if db["kind"] == "consul" or correctness["violation"] is None:
            assert correctness["violation"] is None and correctness["linearizable_keys"] == 8
        else:  # reported, naming its key and the values that disagree
            violation = correctness["violation"]
            assert violation["key"].startswith("c") and correctness["linearizable_keys"] < 8
            print(f"isolate zookeeper: not linearizable: {violation}")
        assert record["verification"]["lost"] == 0, record["verification"]
        assert not record["faults"][0]["error"] + record["faults"][1]["error"]


def test_serializable_reads_of_a_member_cut_off_from_its_peers(lab: Lab, agents_up: Done) -> None:
    """``isolate`` with ``keep_clients`` cuts a follower off its peers only:
    its clients still reach it, and it answers serializable reads from what
    it had, while the other two go on writing. Checked clients reading
    serializably there are counted stale, not as violations: the history
    checks clean. The same on NATS, whose serializable reads are direct
    gets (any replica answers them): what they return from the cut-off
    member is counted the same way."""
    assert agents_up.returncode == 0, agents_up.stderr + agents_up.stdout
    case = yaml.safe_load(lab.config.read_text())
    hosts = case["databases"][0]["hosts"]
    # each its own copy: yaml.safe_dump writes a shared list as an alias
    case["databases"].append(
        database("nats-3hosts", "nats", version=NATS, hosts=[*map(dict, hosts)])
    )
    case["workload"].update(
        type="read",
        consistency="serializable",
        requests=8_000,
        rate=1_000,
        clients=30,
        connections=6,
        # a checked write through the cut-off member waits this long, not 30 s
        request_timeout_s=1.0,
        check={"clients": 8, "keys": 4, "on_violation": "report"},
    )
    case["faults"] = [
        {"at": "2s", "action": "isolate", "member": "follower", "keep_clients": True},
        {"at": "6s", "action": "heal"},
    ]
    _agents_up(lab, case, "partition")  # installs NATS on the hosts
    out = _run_case(lab, case, "partition")

    summary = json.loads((out / "result.json").read_text())
    for index, db in enumerate(("etcd-3hosts", "nats-3hosts")):
        record = json.loads((out / db / "run.json").read_text())
        cut, healed = record["faults"]
        assert cut["keep_clients"] and not cut["error"] + healed["error"], db
        correctness = record["correctness"]
        print(
            f"partition {db}: {correctness['operations']:,} checked operations,"
            f" {correctness['stale_serializable_reads']} stale serializable reads,"
            f" violation: {correctness['violation']}"
        )
        assert correctness["violation"] is None and correctness["violated_keys"] == 0, db
        figures = summary["databases"][index]["figures"]
        assert figures["STALE-SERIALIZABLE-READS"] == correctness["stale_serializable_reads"]
    etcd = json.loads((out / "etcd-3hosts" / "run.json").read_text())
    assert etcd["correctness"]["stale_serializable_reads"] >= 1
    table = (out / "summary.txt").read_text()
    assert "isolate follower from its peers at 2 s, heal at 6 s" in table
    cut = etcd["faults"][0]
    said = (out / "etcd-3hosts" / f"server-{cut['member']}-agent.log").read_text()
    assert "tcp ports 22, 2379, 3500" in said, said[-2000:]


def _host_entry(lab: Lab, host: Any) -> dict[str, Any]:
    return {
        "address": host.address,
        "ssh_user": "root",
        "agent_dir": str(lab.root / "agents" / host.name),
    }


def test_two_load_hosts_drive_the_cluster(lab: Lab, agents_up: Done) -> None:
    """``load_hosts:``: two more machines' agents (brought up by ``agents up``
    beside the running server agents) share an open-loop load on the
    3-member etcd. Every request is there once, the keys are verified, each
    host's share is in run.json, the table's percentiles are numpy's over
    both hosts' own records, and they started together. Then one load
    host's agent is killed mid-load: the run fails naming it, and no etcd
    or load is left running anywhere."""
    assert agents_up.returncode == 0, agents_up.stderr + agents_up.stdout
    case = yaml.safe_load(lab.config.read_text())
    case["workload"].update(
        requests=8_000, rate=2_000, clients=40, connections=8, warmup_requests=500
    )
    case["load_hosts"] = [_host_entry(lab, h) for h in lab.topology.load_hosts]
    # faults and the warm-up work as with one client
    case["faults"] = [
        {"at": "1s", "action": "kill", "member": "follower"},
        {"at": "2s", "action": "restart"},
    ]
    config, up = _agents_up(lab, case, "spread")
    assert up.stdout.count("already running") == 3, up.stdout
    # the load agents may load the case's database hosts, and nothing else
    servers = [h.address for h in lab.topology.server_hosts]
    for host, targets in [(h, servers) for h in lab.topology.load_hosts] + [
        (lab.topology.server_hosts[0], [])
    ]:
        written = yaml.safe_load((lab.root / "agents" / host.name / "agent.yaml").read_text())
        assert written["load_targets"] == targets, (host.name, written)
    try:
        _spread_runs(lab, case)
    finally:
        only_loaders = {
            **case,
            "faults": [],
            "databases": [{"id": "x", "kind": "etcd", "version": ETCD, "endpoints": ["h:1"]}],
        }
        config.write_text(yaml.safe_dump(only_loaders, sort_keys=False))
        down = lab.dbtester("agents", "down", str(config), *lab.ssh_args())
        assert down.returncode == 0, down.stderr + down.stdout


def _spread_runs(lab: Lab, case: dict[str, Any]) -> None:
    out = _run_case(lab, case, "spread")
    db = out / "etcd-3hosts"
    record = json.loads((db / "run.json").read_text())
    hosts = record["load_hosts"]
    assert [h["agent"].rsplit(":", 1)[0] for h in hosts] == [
        h.address for h in lab.topology.load_hosts
    ]
    assert [(h["requests"], h["clients"], h["rate"]) for h in hosts] == [(4000, 20, 1000.0)] * 2
    assert sum(sum(h["counts"].values()) for h in hosts) == 8_000
    merged = np.load(db / "client-latency.npz")["latency_ns"]
    files = [np.load(db / f"client-{i}-latency.npz") for i in range(2)]
    own = [f["latency_ns"] for f in files]
    assert len(merged) == 8_000 and [len(o) for o in own] == [4000, 4000]
    verification = record["verification"]
    assert verification["attempted"] == 8_500 and verification["lost"] == 0, verification
    assert verification["acknowledged"] <= verification["found"] <= 8_500, verification
    assert record["warmup"]["counts"] == {"ok": 500}
    kill, restart = record["faults"]
    assert kill["member"] == restart["member"] and not kill["error"] + restart["error"]
    assert record["load"]["started_unix"] < kill["unix"] < record["load"]["ended_unix"]
    # the table's latencies are the answered requests' (errors are counted apart)
    both = np.concatenate([f["latency_ns"][f["code"] == 0] for f in files]) / 1e6
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    for p in (50, 90, 99, 99.9):
        assert figures[f"Latency p{p:g}"] == pytest.approx(float(np.percentile(both, p)), rel=1e-12)
    # the client rows cover both load hosts (each with an interface of its own)
    assert figures["CLIENT-TOTAL-NETWORK-RX-SUM"] > 0 and figures["CLIENT-MAX-CPU-USAGE"] > 0
    # Each host's start skew is recorded. The 10 ms load hosts promise is
    # held in test_spread_load.py, whose two agents share one machine's clock
    # (so the skew is exact there); here a host's engine wakes at the common
    # start only as promptly as it gets a CPU beside the other test process
    # and three etcd members (it once woke 11.5 ms late), and making this run
    # alone cost a second lab (50 s). Bounded at 1 s: a start that far off is
    # a wrong clock offset, not a busy machine.
    skews = [h["start_skew_ms"] for h in hosts]
    assert all(isinstance(s, float) and abs(s) < 1_000 for s in skews), skews
    print(
        f"spread: {figures['AVG-THROUGHPUT']:,.0f} req/s from 2 hosts,"
        f" p99 {figures['Latency p99']:.2f} ms, start skews {skews} ms,"
        f" throughputs {[round(h['throughput']) for h in hosts]} req/s,"
        f" CPU {[round(h['cpu_seconds'], 2) for h in hosts]} s"
    )

    _a_load_host_killed(lab, case)


def _a_load_host_killed(lab: Lab, case: dict[str, Any]) -> None:
    """One load host's agent killed mid-load: the run fails, naming it."""
    victim = lab.topology.load_hosts[1]
    pid = int((lab.root / "agents" / victim.name / "agent.pid").read_text())
    longer = {**case, "workload": {**case["workload"], "requests": 60_000}, "faults": []}
    config = lab.root / "spread-kill.yaml"
    config.write_text(yaml.safe_dump(longer, sort_keys=False))
    # the victim's agent makes this folder when its Load call arrives, before
    # its engine starts
    runs = lab.root / "agents" / victim.name / "data" / "runs"
    earlier = set(runs.glob("*/etcd-3hosts/load-*"))
    absent = [time.monotonic()]  # the last time the folder was seen missing
    killed: list[float] = []
    over = threading.Event()  # the run ended (before its load began, if no kill)
    failed: list[BaseException] = []

    def loading() -> bool:
        if set(runs.glob("*/etcd-3hosts/load-*")) - earlier:
            return True
        absent[0] = time.monotonic()
        return over.is_set()

    def kill_once_loading() -> None:
        try:
            poll_until(loading, 600, interval_s=0.05, message="the victim's load never began")
            if not over.is_set():
                os.kill(pid, signal.SIGKILL)
                killed.append(time.monotonic())
        except BaseException as exc:  # told after the run
            failed.append(exc)

    killer = threading.Thread(target=kill_once_loading)
    killer.start()
    try:
        run = lab.dbtester(
            "run", "--no-charts", str(config), "--out", str(lab.root / "spread-kill-results")
        )
        ended = time.monotonic()
    finally:
        over.set()
        killer.join()
    assert not failed and killed, (failed, run.stderr[-3000:])
    assert run.returncode == 1, run.stderr[-3000:]
    assert f"load host 1 failed: agent {victim.address}:3500" in run.stderr, run.stderr[-3000:]
    # It stopped early, computed from the schedule: the load's 60,000
    # requests are due at 2,000/s from its start, which came after its folder
    # was made, itself after absent[0]; as planned it would end 30 s after
    # that at the soonest. (The run fails when a load host's call breaks, or
    # after SILENT_S = 4 s without word from it.)
    assert ended < absent[0] + 30, (ended - absent[0], killed[0] - absent[0])
    for host in [*lab.topology.server_hosts, lab.topology.load_hosts[0]]:
        left = subprocess.run(
            ["ip", "netns", "pids", host.name], capture_output=True, text=True, check=False
        ).stdout.split()
        names = [_comm(p) for p in left]
        assert "etcd" not in names, (host.name, names)
    survivor = lab.topology.load_hosts[0]
    assert not list((lab.root / "agents" / survivor.name).glob("**/runs/*/etcd-3hosts/load-*"))


def test_agents_up_run_and_down(lab: Lab, agents_up: Done) -> None:
    up = agents_up
    assert up.returncode == 0, up.stderr + up.stdout
    assert "wrote a new agent token" in up.stdout
    token_file = Path(lab.env["DBTESTER_AGENT_TOKEN_FILE"])
    assert token_file.stat().st_mode & 0o777 == 0o600
    for host in lab.topology.server_hosts:
        remote = lab.root / "agents" / host.name
        assert (remote / "agent.token").stat().st_mode & 0o777 == 0o600
        assert (remote / "agent.token").read_text().strip() == token_file.read_text().strip()
        assert (remote / "home" / "etcd" / ETCD / "etcd").stat().st_mode & 0o100
    token = token_file.read_text().strip()
    assert token not in up.stdout + up.stderr

    # A second `up` changes nothing and leaves the same agents running.
    pids = {
        h.name: (lab.root / "agents" / h.name / "agent.pid").read_text()
        for h in lab.topology.server_hosts
    }
    again = lab.dbtester("agents", "up", str(lab.config), *lab.ssh_args(), "--no-systemd")
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already running") == 3
    assert "copying" not in again.stdout
    for host in lab.topology.server_hosts:
        assert (lab.root / "agents" / host.name / "agent.pid").read_text() == pids[host.name]

    status = lab.dbtester("agents", "status", str(lab.config), *lab.ssh_args())
    assert status.returncode == 0, status.stderr
    assert status.stdout.count("serving") == 3
    for host in lab.topology.server_hosts:
        assert host.address in status.stdout

    rx_before = {h.name: h.rx_bytes() for h in lab.topology.server_hosts}
    out = lab.root / "results"
    run = lab.dbtester("run", str(lab.config), "--out", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    db = result["databases"][0] if isinstance(result["databases"], list) else None
    assert db is not None
    for name in ("config.yaml", "summary.txt", "summary.csv", "README.md"):
        assert (out / name).is_file(), name
    assert len(list((out / "charts").glob("*.svg"))) >= 10
    for i in range(3):
        assert (out / "etcd-3hosts" / f"server-{i}-metrics.csv").stat().st_size > 0
    # Each server's network counters are its own: a row per server, non-zero,
    # and never more than what that host's interface really carried.
    rows = {r[0]: r[1:] for r in csv.reader((out / "summary.csv").open())}
    for i, host in enumerate(lab.topology.server_hosts):
        for way in ("RX", "TX"):
            value = float(rows[f"SERVER-{i + 1}-NETWORK-{way}-DATA-SUM"][0])
            assert value > 0, (host.name, way)
        per_second = list(csv.DictReader((out / "etcd-3hosts" / f"server-{i}-metrics.csv").open()))
        received = sum(float(r["receive_bytes"]) for r in per_second)
        carried = host.rx_bytes() - rx_before[host.name]
        assert 0 < received <= carried, (host.name, received, carried)
    table = (out / "summary.txt").read_text()
    assert "SERVER-3-NETWORK-RX-DATA-SUM" in table

    down = lab.dbtester("agents", "down", str(lab.config), *lab.ssh_args())
    assert down.returncode == 0, down.stderr
    assert down.stdout.count("stopped the agent") == 3
    for host in lab.topology.server_hosts:
        assert not (lab.root / "agents" / host.name).exists()
        leftover = subprocess.run(
            ["ip", "netns", "pids", host.name], capture_output=True, text=True, check=False
        ).stdout.split()
        assert [p for p in leftover if _comm(p) != "sshd"] == []
    again = lab.dbtester("agents", "down", str(lab.config), *lab.ssh_args())
    assert again.returncode == 0 and again.stdout.count("nothing to do") == 3


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_unknown_host_key_is_refused(lab: Lab) -> None:
    empty = lab.root / "empty_known_hosts"
    empty.write_text("")
    result = lab.dbtester("agents", "status", str(lab.config), *lab.ssh_args(empty))
    assert result.returncode == 1
    assert "REFUSED: unknown host key" in result.stdout
    assert "--accept-new-host-keys" in result.stdout
    assert empty.read_text() == ""


def test_accepting_new_host_keys_is_explicit_and_warns(lab: Lab) -> None:
    fresh = lab.root / "tofu_known_hosts"
    fresh.unlink(missing_ok=True)
    result = lab.dbtester(
        "agents", "status", str(lab.config), *lab.ssh_args(fresh), "--accept-new-host-keys"
    )
    assert result.stderr.count("warning: accepting the new ssh-ed25519 host key") == 3
    lines = fresh.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(
        h.address for h in lab.topology.server_hosts
    )
    # Now known: no warning the second time.
    again = lab.dbtester(
        "agents", "status", str(lab.config), *lab.ssh_args(fresh), "--accept-new-host-keys"
    )
    assert "warning: accepting" not in again.stderr


def test_changed_host_key_is_refused_even_with_opt_in(lab: Lab) -> None:
    forged = lab.root / "forged_known_hosts"
    other = lab.root / "other_key"
    other.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, key = Path(f"{other}.pub").read_text().split()[:2]
    forged.write_text("".join(f"{h.address} {key_type} {key}\n" for h in lab.topology.server_hosts))
    result = lab.dbtester(
        "agents", "status", str(lab.config), *lab.ssh_args(forged), "--accept-new-host-keys"
    )
    assert result.returncode == 1
    assert result.stdout.count("REFUSED: the host key changed") == 3
    assert "ssh-keygen -f" in result.stdout


def test_wrong_ssh_key_names_the_host(lab: Lab) -> None:
    stranger = lab.root / "stranger_key"
    stranger.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    result = lab.dbtester(
        "agents", "up", str(lab.config), "-i", str(stranger), "--known-hosts", str(lab.known_hosts)
    )
    assert result.returncode == 1
    assert "could not bring up 3 of 3 agent(s)" in result.stderr
    for host in lab.topology.server_hosts:
        assert f"root@{host.address}:22: authentication failed with key {stranger}" in result.stderr


def test_unreachable_host_names_it(lab: Lab) -> None:
    case = yaml.safe_load(lab.config.read_text())
    dead = lab.topology.prefix + ".99"  # on the subnet, nobody there
    case["databases"][0]["hosts"][2]["address"] = dead
    config = lab.root / "unreachable.yaml"
    config.write_text(yaml.safe_dump(case, sort_keys=False))
    result = lab.dbtester("agents", "status", str(config), *lab.ssh_args(), timeout=120)
    assert result.returncode == 1
    assert f"root@{dead}:22: cannot reach the host" in result.stdout
    assert "with problems:" in result.stderr and f"{dead}:3500" in result.stderr


def _one_host_case(lab: Lab, agent_dir: Path) -> Path:
    case = yaml.safe_load(lab.config.read_text())
    case["databases"][0]["hosts"] = case["databases"][0]["hosts"][:1]
    case["databases"][0]["hosts"][0]["agent_dir"] = str(agent_dir)
    config = lab.root / f"{agent_dir.name}.yaml"
    config.write_text(yaml.safe_dump(case, sort_keys=False))
    return config


def test_up_refuses_a_directory_it_did_not_make(lab: Lab) -> None:
    foreign = lab.root / "someones-files"
    foreign.mkdir(exist_ok=True)
    (foreign / "thesis.tex").write_text("precious")
    config = _one_host_case(lab, foreign)
    result = lab.dbtester("agents", "up", str(config), *lab.ssh_args(), "--no-systemd")
    assert result.returncode == 1
    assert f"agent_dir {foreign} exists, is not empty and was not made by" in result.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["thesis.tex"]


def test_down_removes_nothing_without_ups_marker(lab: Lab) -> None:
    foreign = lab.root / "looks-like-an-agent"
    (foreign / "venv").mkdir(parents=True, exist_ok=True)
    (foreign / "data").mkdir(exist_ok=True)
    (foreign / "agent.yaml").write_text("mine\n")
    config = _one_host_case(lab, foreign)
    result = lab.dbtester("agents", "down", str(config), *lab.ssh_args())
    assert result.returncode == 1
    assert "not made by dbtester agents up, so nothing is removed" in result.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["agent.yaml", "data", "venv"]
