"""Scheduled faults through real agents on a real 3-member etcd cluster:
kill (data kept, not an unexpected death), restart on the same data, pause
and resume, and the states that refuse each."""

from __future__ import annotations

import csv
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from dbtester.agent.client import AgentClient
from dbtester.databases import KINDS
from dbtester.databases.base import Peer
from dbtester.errors import AgentError
from tests.integration.agents import agents, alive, loopback_peers
from tests.support.cluster import VERSIONS, b64, post, wait_serving
from tests.support.poll import poll_until

RUN = "faults"


def _refuses(peer: Peer) -> bool:
    """Whether the member leaves a count unanswered for 1 s."""
    try:
        _count(peer, timeout=1.0)
    except OSError:
        return True
    return False


def _count(peer: Peer, timeout: float = 2.0) -> int:
    """Keys under "k" as ``peer`` itself sees them (serializable: no leader asked)."""
    body = {"key": b64("k"), "range_end": b64("l"), "count_only": True, "serializable": True}
    request = urllib.request.Request(
        f"{peer.url('client')}/v3/kv/range", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return int(json.loads(reply.read()).get("count", 0))


def _put(peer: Peer, keys: range) -> None:
    for i in keys:
        post(f"{peer.url('client')}/v3/kv/put", {"key": b64(f"k{i:05d}"), "value": b64("v")})


def _state(client: AgentClient, index: int) -> str:
    (member,) = [m for m in client.status().members if m.member_index == index]
    return str(member.state)


def _eventually(check: Callable[[], bool], seconds: float = 20.0) -> None:
    """Until ``check()`` is true; a member that does not answer yet is not."""

    def answered() -> bool:
        try:
            return check()
        except (OSError, urllib.error.URLError):
            return False

    poll_until(answered, seconds, interval_s=0.2, message="not true")


def _sampled_pids(metrics: Path) -> list[int]:
    """The pid column of a member's metrics.csv as far as it is written."""
    try:
        text = metrics.read_text()
    except FileNotFoundError:
        return []
    whole = text[: text.rfind("\n") + 1]  # a row being appended is left out
    return [int(row["pid"]) for row in csv.DictReader(whole.splitlines())]


def test_kill_restart_pause_resume(tmp_path: Path, installed_home) -> None:
    home = installed_home("etcd", VERSIONS["etcd"])
    peers = loopback_peers("etcd", 3)
    with agents(tmp_path, 3, home=home) as running:
        clients = [agent.client() for agent in running]
        for i, client in enumerate(clients):
            client.start(
                run_id=RUN,
                database_id="db",
                kind="etcd",
                version=VERSIONS["etcd"],
                member_index=i,
                peers=peers,
                flags={},
            )
        wait_serving("etcd", peers)
        _put(peers[0], range(0, 100))
        victim = clients[2]
        first_pid = next(m.pid for m in victim.status().members)
        sampled = running[2].data_root / "runs" / RUN / "db" / "member-2" / "metrics.csv"
        poll_until(
            lambda: first_pid in _sampled_pids(sampled),
            30,
            interval_s=0.1,
            message="no sample of the first process",
        )

        # kill: the process group is gone, the state is "killed" (never "exited",
        # which the controller counts as a death), the others go on writing
        killed = victim.fault("kill", RUN, "db", 2)
        assert killed.state == "killed" and killed.at_unix > 0
        assert not alive(first_pid)
        assert _state(victim, 2) == "killed"
        _put(peers[0], range(100, 200))
        with pytest.raises(AgentError, match="FAILED_PRECONDITION"):
            victim.fault("kill", RUN, "db", 2)
        poll_until(
            lambda: 0 in _sampled_pids(sampled),
            30,
            interval_s=0.1,
            message="no sample while it is down",
        )

        # restart: a new process on the same data dir catches up with the rest
        restarted = victim.fault("restart", RUN, "db", 2)
        assert restarted.state == "running" and restarted.pid != first_pid
        _eventually(lambda: _count(peers[2]) == 200)

        # pause: the member stops answering; resume: it answers again
        with pytest.raises(AgentError, match="FAILED_PRECONDITION"):
            victim.fault("resume", RUN, "db", 2)
        assert victim.fault("pause", RUN, "db", 2).state == "paused"
        assert _state(victim, 2) == "paused"
        # SIGSTOP reaches every thread of the group soon after it is sent,
        # not at once: a request in that moment may still be answered
        poll_until(
            lambda: _refuses(peers[2]), 10, interval_s=0.1, message="the paused member answers"
        )
        _put(peers[0], range(200, 250))  # two of three still make a quorum
        assert victim.fault("resume", RUN, "db", 2).state == "running"
        _eventually(lambda: _count(peers[2]) == 250)

        # the metrics show the gap (pid 0 while it was down) and both processes
        stopped = victim.stop(RUN, "db", 2)
        assert not stopped.archived_to  # a scheduled kill is not a failure
        metrics = tmp_path / "m.csv"
        victim.fetch(RUN, "db", 2, "metrics.csv", metrics)
        pids = [int(row["pid"]) for row in csv.DictReader(metrics.open())]
        assert first_pid in pids and restarted.pid in pids and 0 in pids
        assert pids.index(0) > pids.index(first_pid)
        assert pids.index(restarted.pid) > pids.index(0)
        for i, client in enumerate(clients[:2]):
            client.stop(RUN, "db", i)


@pytest.mark.parametrize("kind", ["etcd", "zookeeper", "consul"])
def test_the_leader_is_found_and_replaced(kind: str, tmp_path: Path, installed_home) -> None:
    """Each kind names its leader; once that member is killed, the others elect
    another, and the kind names that one."""
    home = installed_home(kind, VERSIONS[kind])
    peers = loopback_peers(kind, 3)
    with agents(tmp_path, 3, home=home) as running:
        clients = [agent.client() for agent in running]
        for i, client in enumerate(clients):
            client.start(
                run_id=RUN,
                database_id="db",
                kind=kind,
                version=VERSIONS[kind],
                member_index=i,
                peers=peers,
                flags={},
            )
        wait_serving(kind, peers)
        old = _leader_other_than(kind, peers, None, seconds=30)
        clients[old].fault("kill", RUN, "db", old)
        _leader_other_than(kind, peers, old, seconds=60)
        for i, client in enumerate(clients):
            client.stop(RUN, "db", i)


def _leader_other_than(kind: str, peers: list[Peer], old: int | None, seconds: float) -> int:
    """The leader the kind names, once it names one other than ``old``."""
    found: list[int] = []

    def named() -> bool:
        leader = KINDS[kind].leader(peers)
        if leader is not None and leader != old:
            found.append(leader)
            return True
        return False

    poll_until(named, seconds, interval_s=0.2, message=f"{kind}: no leader but {old}")
    return found[-1]
