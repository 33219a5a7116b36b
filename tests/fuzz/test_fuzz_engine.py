"""Fuzz the load engine's plan at the Python boundary (``_engine.start``):
any value either is refused at once (ValueError, TypeError or MemoryError,
one line) or gives a load that stops when told, within seconds, and whose
records hold together. Nothing may abort, hang or allocate without bound.

The plans are real ones (``dbtester.load.native.plan`` for each kind, as a run
builds them) after structured mutations, aimed at peers on loopback that a
run should never meet: a closed port, a server that reads and never answers,
and one that answers every connection with junk bytes.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

from dbtester import _engine
from dbtester.databases import KINDS
from dbtester.databases.base import LoadSettings
from dbtester.load.native import plan
from dbtester.workloads import workload_of
from tests.fuzz.engine import budget, fuzz
from tests.fuzz.mutate import mutate_data

pytestmark = pytest.mark.fuzz

#: a load told to stop has 0.5 s for what is in flight; the rest is teardown,
#: which has no promised bound: this only tells a hang from a busy machine
STOP_SECONDS = 10.0
#: what the process may hold after an example: a plan may ask for a 1 GB value
RSS_LIMIT = 3 * 1024**3
ERRORS = (ValueError, TypeError, MemoryError, OverflowError)

#: names a mutation may put in a plan, besides those of the real plans
WORDS = ["etcd", "zookeeper", "consul", "write", "read", "linearizable", "serializable"]


class Peer:
    """A TCP server on loopback, in a thread: ``mode`` is "sink" (reads and
    never answers) or "junk" (answers each connection with bytes that are no
    protocol, then closes)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.server = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.open: list[socket.socket] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        junk = bytes(range(256)) * 4
        while not self.done.is_set():
            try:
                conn, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            if self.mode == "junk":
                with contextlib.suppress(OSError):
                    conn.sendall(junk)
                conn.close()
            else:  # the kernel buffers what is sent; nobody ever reads or answers
                self.open.append(conn)
                if len(self.open) > 4096:
                    self.open.pop(0).close()

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        self.server.close()
        for conn in self.open:
            conn.close()


@dataclass(frozen=True)
class World:
    endpoints: dict[str, str]  # peer name -> host:port
    plans: list[dict[str, Any]]

    @property
    def keys(self) -> list[str]:
        """Every key of the real plans, their steps and options."""
        found = {k for p in self.plans for k in p}
        found |= {k for p in self.plans for step in p["steps"] for k in step}
        found |= {k for p in self.plans for k in p["options"]}
        return sorted(found | set(WORDS))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    peers = [Peer("sink"), Peer("junk")]
    endpoints = {p.mode: f"127.0.0.1:{p.port}" for p in peers}
    endpoints["closed"] = f"127.0.0.1:{_closed_port()}"
    plans = []
    for kind_name, kind in KINDS.items():
        for workload in (
            workload_of(
                type="write", requests=20, key_size=8, value_size=16, clients=4, connections=2
            ),
            workload_of(
                type="read",
                requests=30,
                key_size=8,
                clients=6,
                connections=3,
                client_steps=(2, 6),
                rate=500,
                consistency="serializable",
            ),
            workload_of(
                type="mixed",
                requests=40,
                key_size=8,
                value_size=40,
                clients=4,
                connections=2,
                key_count=50,
                read_proportion=0.4,
                update_proportion=0.2,
                insert_proportion=0.2,
                read_modify_write_proportion=0.2,
                request_distribution="latest",
            ),
        ):
            settings = LoadSettings(
                endpoints=(endpoints["sink"],),
                client=kind.client_model().model_dump(),
                key_size=workload.key_size,
                value_size=workload.value_size,
                consistency=workload.read_consistency,
                timeout_s=1.0,
            )
            plans.append(dict(plan(kind_name, settings, workload, threads=1, max_errors=5)))
    try:
        yield World(endpoints, plans)
    finally:
        for peer in peers:
            peer.close()


def make_plan(draw: st.DataObject, world: World) -> Any:
    base = draw.draw(st.sampled_from(world.plans), label="plan")
    base = {**base, "endpoints": [draw.draw(st.sampled_from(list(world.endpoints.values())))]}
    if draw.draw(st.integers(0, 9), label="as is") == 0:
        return base
    return mutate_data(draw, base, world.keys)


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def check_result(result: Any) -> None:
    lengths = {len(result[name]) for name in ("due_ns", "latency_ns", "service_ns", "code", "step")}
    assert len(lengths) == 1, lengths
    assert result["codes"] and result["codes"][0] == "ok", result["codes"]
    if len(result["code"]):
        assert int(np.max(result["code"])) < len(result["codes"])
        assert bool(np.all(result["service_ns"] <= result["latency_ns"]))
    assert isinstance(result["stopped"], str)


def check_plan(value: Any, pause: float) -> None:
    """The boundary's contract for one plan, told to stop after ``pause`` s."""
    try:
        load = _engine.start(value)
    except ERRORS as exc:
        message = str(exc)
        assert message and "\n" not in message, repr(message)
        return
    assert len(load.progress()) == 3
    time.sleep(pause)  # the stimulus: the load runs this long before the stop
    load.stop()
    # A hang guard, no timing judged: stop() gives what is in flight 0.5 s
    # (the engine's GRACE) and its teardown is promised no bound; wait()
    # returns as soon as the load is over, and False only after 10 s.
    assert load.wait(STOP_SECONDS), "the load did not stop"
    try:
        result = load.result()
    except RuntimeError as exc:  # the engine could not go on (no connection, ...)
        assert str(exc) and "\n" not in str(exc), repr(str(exc))
    else:
        check_result(result)
    assert _rss() < RSS_LIMIT, f"{_rss() / 1e6:.0f} MB held after one plan"


def test_the_real_plans_run_and_stop(world: World) -> None:
    for value in world.plans:
        for endpoint in world.endpoints.values():
            check_plan({**value, "endpoints": [endpoint]}, pause=0.05)


def test_fuzz_engine(world: World) -> None:
    def check(draw: st.DataObject) -> None:
        pause = draw.draw(st.sampled_from([0.0, 0.01, 0.05]), label="run for")
        check_plan(make_plan(draw, world), pause)

    fuzz("engine plan", st.data(), check, budget())
