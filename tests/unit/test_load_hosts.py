"""``load_hosts:`` in a test case (what may share a load, refused at its line
with the reason), the agents ``agents up`` brings up for them, what a load
agent checks in a Load request before it dials anything, and the note the
table gets."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dbtester.agent.load import LoadRefused, Window, checked_plan
from dbtester.config.load import load_test_case_text
from dbtester.control.record import load_hosts_note
from dbtester.proto import agent_pb2 as pb
from dbtester.remote import agent_hosts
from dbtester.results import LoadHostRecord
from tests.conftest import ROOT
from tests.unit.problems import problems_of

CASE = """\
title: t
workload:
  type: write
  requests: 100
  clients: 8
  connections: 4
databases:
  - id: a
    kind: etcd
    version: 3.5.17
    hosts: [{address: 10.0.0.1}, {address: 10.0.0.2}, {address: 10.0.0.3}]
load_hosts:
  - {address: 10.0.0.8}
  - {address: 10.0.0.9, agent_port: 3600}
"""


def test_load_hosts_are_agents_that_install_nothing() -> None:
    case = load_test_case_text(CASE, "case.yaml").case
    assert [h.address for h in case.load_hosts] == ["10.0.0.8", "10.0.0.9"]
    hosts = agent_hosts(case, "me")
    assert [(h.address, h.agent_port) for h in hosts] == [
        ("10.0.0.8", 3500),
        ("10.0.0.9", 3600),
        ("10.0.0.1", 3500),
        ("10.0.0.2", 3500),
        ("10.0.0.3", 3500),
    ]
    assert [h.installs for h in hosts[:2]] == [(), ()]
    # load hosts may load the case's databases; servers that only serve, none
    assert hosts[0].load_targets == ("10.0.0.1", "10.0.0.2", "10.0.0.3")
    assert [h.load_targets for h in hosts[2:]] == [(), (), ()]
    # a server that also loads is brought up once, with its database
    both = CASE.replace("{address: 10.0.0.8}", "{address: 10.0.0.1}")
    hosts = agent_hosts(load_test_case_text(both, "case.yaml").case, "me")
    assert [h.address for h in hosts].count("10.0.0.1") == 1
    assert next(h for h in hosts if h.address == "10.0.0.1").installs == (("etcd", "3.5.17"),)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("type: write", "type: watch\n  rate: 50"), "watch load keeps its writers and watchers"),
        (
            ("clients: 8\n  connections: 4", "clients: 1\n  connections: 1"),
            "2 load hosts need at least 2 clients, one",
        ),
        (
            ("type: write", "type: mixed\n  insert_proportion: 0.5\n  read_proportion: 0.45"),
            "set insert_proportion to 0",
        ),
        (
            ("{address: 10.0.0.9, agent_port: 3600}", "{address: 10.0.0.8}"),
            "listed twice",
        ),
        (
            ("    hosts: [{address: 10.0.0.1}, {address: 10.0.0.2}, {address: 10.0.0.3}]\n", ""),
            "runs on this machine's loopback, which load host 10.0.0.8 cannot reach",
        ),
        (
            ("  requests: 100\n", "", "load_hosts:", "search: {slo_ms: 10}\nload_hosts:"),
            "give load_hosts or search",
        ),
    ],
)
def test_what_cannot_share_a_load_is_refused_at_load_hosts(
    change: tuple[str, ...], words: str
) -> None:
    text = CASE
    for old, new in zip(change[::2], change[1::2], strict=True):
        text = text.replace(old, new)
    # the key's line, or its list's first item
    line = text.splitlines().index("load_hosts:") + 1
    at = (f"{line}:", f"{line + 1}:")
    problems = problems_of(text)
    assert any(p.startswith(at) and words in p for p in problems), problems


def test_loopback_load_hosts_may_load_a_database_on_this_machine() -> None:
    text = (
        CASE.replace(
            "    hosts: [{address: 10.0.0.1}, {address: 10.0.0.2}, {address: 10.0.0.3}]\n", ""
        )
        .replace("10.0.0.8", "127.0.0.1")
        .replace("10.0.0.9", "localhost")
    )
    assert len(load_test_case_text(text, "case.yaml").case.load_hosts) == 2


def _request(plan: object, **fields: object) -> pb.LoadRequest:
    text = plan if isinstance(plan, str) else json.dumps(plan)
    named = {"run_id": "r", "database_id": "db", **fields}
    return pb.LoadRequest(plan_json=text, **named)  # type: ignore[arg-type]


GOOD = {"endpoints": ["10.0.0.1:2379"], "threads": 1, "start_unix_ns": 5}


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (_request(GOOD, run_id="../x"), "run_id"),
        (_request("x" * 70_000), "is not a plan"),
        (_request("{"), "not JSON"),
        (_request("[1]"), "JSON object"),
        (_request({**GOOD, "endpoints": ["10.0.0.1:2379; rm -rf /"]}), "HOST:PORT"),
        (_request({**GOOD, "endpoints": []}), "HOST:PORT"),
        (_request({**GOOD, "endpoints": ["h:1"] * 65}), "HOST:PORT"),
        (_request({**GOOD, "threads": 1000}), "threads"),
        (_request(GOOD, start_unix=1.0), "is not within 60 s"),
    ],
)
def test_a_load_agent_refuses_what_it_should_not_run(request_: pb.LoadRequest, words: str) -> None:
    with pytest.raises(LoadRefused, match=words) as refused:
        checked_plan(request_, time.time())
    assert refused.value.status == "INVALID_ARGUMENT"


def test_a_deployed_load_agent_dials_only_the_cases_databases() -> None:
    targets = ("10.0.0.1", "db.example", "fd00::1")
    for endpoint in ("10.0.0.1:2379", "db.example:8500", "[fd00::1]:2181"):
        plan = {**GOOD, "endpoints": [endpoint]}
        assert checked_plan(_request(plan), time.time(), targets)["endpoints"] == [endpoint]
    stranger = {**GOOD, "endpoints": ["10.0.0.1:2379", "169.254.169.254:80"]}
    with pytest.raises(
        LoadRefused, match=r"'169\.254\.169\.254:80' is not on a database"
    ) as refused:
        checked_plan(_request(stranger), time.time(), targets)
    assert refused.value.status == "PERMISSION_DENIED"
    with pytest.raises(LoadRefused, match=r"its hosts: none\)"):
        checked_plan(_request(GOOD), time.time(), ())


def test_a_plans_own_start_is_never_taken() -> None:
    plan = checked_plan(_request(GOOD, start_unix=time.time() + 1), time.time())
    assert "start_unix_ns" not in plan and plan["endpoints"] == ["10.0.0.1:2379"]


def _host(index: int, *, limited: bool, skew: float) -> LoadHostRecord:
    return LoadHostRecord(
        index=index,
        agent=f"10.0.0.{8 + index}:3500",
        clock_offset_s=0.004 * index,
        clock_rtt_s=0.001,
        requests=500,
        clients=4,
        connections=2,
        rate=0.0,
        start_skew_ms=skew,
        started_unix=100.0,
        ended_unix=102.0,
        counts={"ok": 500},
        throughput=250.0,
        cpu_seconds=1.9,
        engine_cpu_seconds=1.9 if limited else 0.5,
        workers=1,
        cores=2,
        cpu_limited=limited,
    )


def test_the_note_names_a_client_at_its_cpu_limit_first() -> None:
    assert load_hosts_note(()) is None
    calm = load_hosts_note((_host(0, limited=False, skew=0.5), _host(1, limited=False, skew=-2.0)))
    assert calm is not None
    assert calm.startswith("Load from 2 hosts: host 0 (10.0.0.8:3500) 500 requests, 250 req/s")
    assert "engine CPU 25%" in calm and "Clock offsets up to 4.0 ms" in calm
    assert calm.endswith("worst start skew 2.0 ms.")
    busy = load_hosts_note((_host(0, limited=False, skew=0.5), _host(1, limited=True, skew=1.0)))
    assert busy is not None
    assert busy.startswith("host 1 (10.0.0.9:3500) ran its engine at its CPU limit")
    assert "engine CPU 95%" in busy and "waiting" not in busy


@pytest.mark.parametrize(
    ("run", "wait", "workers", "limited"),
    [
        (1.8, 0.0, 1, True),  # its one thread on a CPU 90% of 2 s
        (0.3, 1.6, 1, True),  # starved: waiting for a CPU most of the time
        (0.3, 0.3, 1, False),
        (0.1, 1.4, 1, True),  # runnable 75% of 2 s: the search's rule
        (0.1, 1.38, 1, False),  # 74%
        (1.8, 0.0, 2, False),  # two threads had 4 s between them
        (None, 2.0, 1, False),  # not measured
    ],
)
def test_a_host_is_at_its_cpu_limit_when_its_engine_was_runnable(
    run: float | None, wait: float | None, workers: int, limited: bool
) -> None:
    from dbtester.control.spread import at_cpu_limit

    assert at_cpu_limit(run, wait, workers, 2.0) is limited


class _Sched:
    """A SchedMeter's counters, advanced by hand."""

    def __init__(self) -> None:
        self.run_ns = self.wait_ns = 0
        self.samples = 0

    def sample(self) -> None:
        self.samples += 1

    @property
    def run_seconds(self) -> float:
        return self.run_ns / 1e9

    @property
    def wait_seconds(self) -> float:
        return self.wait_ns / 1e9


def test_a_load_hosts_cpu_counts_from_the_common_start() -> None:
    """The engine connects, then sleeps until the common start: what it did
    before is left out, and the window opens at that start, so the sleep
    does not read as an idle engine."""
    sched = _Sched()
    begin = time.time() + 0.2
    window = Window(sched, begin)  # type: ignore[arg-type]
    assert 0.0 < window.poll_s() <= 0.2  # the next poll wakes on the start
    sched.run_ns, sched.wait_ns = 50_000_000, 10_000_000  # connecting
    window.sample()
    assert window.since < begin  # not open yet
    time.sleep(max(0.0, begin - time.time()))
    window.sample()
    assert window.since >= begin and window.poll_s() > 0.2
    sched.run_ns, sched.wait_ns = 350_000_000, 1_010_000_000
    window.sample()
    assert window.run_seconds == pytest.approx(0.3)
    assert window.wait_seconds == pytest.approx(1.0)


def test_a_load_without_a_common_start_counts_from_its_own() -> None:
    sched = _Sched()
    before = time.time()
    window = Window(sched, 0.0)  # type: ignore[arg-type]
    assert before <= window.since <= time.time() and sched.samples == 1
    sched.run_ns = 200_000_000
    window.sample()
    assert window.run_seconds == pytest.approx(0.2) and window.wait_seconds == 0.0


def test_the_example_agent_yaml_restricts_loads_once_uncommented(tmp_path: Path) -> None:
    """agents/agent.example.yaml shows load_targets; uncommented, it is what
    the agent checks a Load's endpoints against."""
    from dbtester.agent.config import load_agent_config

    example = ROOT / "agents" / "agent.example.yaml"
    text = example.read_text()
    assert load_agent_config(example).load_targets is None
    line = next(x for x in text.splitlines() if x.startswith("# load_targets:"))
    own = tmp_path / "agent.yaml"
    own.write_text(text.replace(line, line[2:]))
    assert load_agent_config(own).load_targets == ("10.0.0.2", "10.0.0.3", "10.0.0.4")
