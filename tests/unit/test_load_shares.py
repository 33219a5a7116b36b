"""Several load hosts' shares of one load add up to it exactly, their
schedules interleave into its one schedule, and their records merge into
one set whose percentiles are numpy's over every request."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbtester.errors import DbtesterError
from dbtester.load.shares import merge, split
from dbtester.results import Records
from dbtester.workloads import Workload, workload_of


def _workload(**given: object) -> Workload:
    return workload_of(**{"type": "write", "key_size": 16, **given})


@settings(max_examples=200, deadline=None)
@given(
    hosts=st.integers(1, 5),
    clients=st.integers(5, 300),
    connections=st.integers(5, 40),
    requests=st.integers(10, 10_000),
    steps=st.integers(1, 3),
)
def test_the_shares_add_up_to_the_load(
    hosts: int, clients: int, connections: int, requests: int, steps: int
) -> None:
    client_steps = [clients * (s + 1) for s in range(steps)] if steps > 1 else []
    workload = _workload(
        requests=requests,
        clients=clients * steps,
        connections=min(connections, clients),
        client_steps=client_steps,
    )
    shares = split(workload, hosts, first_key=100, write_id_base=7)
    assert [s.host for s in shares] == list(range(hosts))
    for number, whole in enumerate(workload.step_plan()):
        parts = [s.steps[number] for s in shares]
        assert tuple(map(sum, zip(*parts, strict=True))) == whole
        assert all(min(part) >= 0 and part[0] >= 1 and part[1] >= 1 for part in parts)
        # as even as they go: no two hosts differ by more than one
        for column in zip(*parts, strict=True):
            assert max(column) - min(column) <= 1
    # keys and write ids: each host its own run of them, together the load's
    keys = np.concatenate([np.arange(s.requests) + s.first_key for s in shares])
    assert np.array_equal(np.sort(keys), np.arange(requests) + 100)
    assert [s.write_id_base - 7 for s in shares] == [s.first_key - 100 for s in shares]


@pytest.mark.parametrize(("hosts", "requests"), [(2, 1000), (3, 1000), (4, 7)])
def test_the_hosts_schedules_interleave_into_the_loads(hosts: int, requests: int) -> None:
    rate = 500.0
    shares = split(_workload(requests=requests, rate=rate, clients=8, connections=4), hosts)
    due = np.sort(
        np.concatenate([s.start_offset_s + np.arange(s.requests) / s.rate for s in shares])
    )
    assert all(s.rate == rate / hosts for s in shares)
    np.testing.assert_allclose(due, np.arange(requests) / rate, atol=1e-9)


def test_as_fast_as_possible_starts_together() -> None:
    shares = split(_workload(requests=100, clients=4, connections=4), 2)
    assert [(s.rate, s.start_offset_s) for s in shares] == [(0.0, 0.0), (0.0, 0.0)]


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"clients": 2, "connections": 2}, "3 load hosts need at least 3 clients, one each"),
        ({"clients": 9, "connections": 2}, "3 load hosts need at least 3 connections"),
        (
            {"clients": 9, "connections": 6, "client_steps": [2, 9]},
            "3 clients in client step 1, one each; there are 2",
        ),
    ],
)
def test_a_host_without_clients_is_refused(given: dict[str, object], words: str) -> None:
    with pytest.raises(DbtesterError, match=words):
        split(_workload(requests=100, **given), 3)


def _records(rng: np.random.Generator, n: int, start_ns: int, codes: list[str]) -> Records:
    return Records(
        start_ns + np.sort(rng.integers(0, 10**9, n)),
        rng.integers(10**5, 10**8, n),
        rng.integers(10**5, 10**8, n),
        rng.integers(0, len(codes), n).astype(np.uint8),
        np.zeros(n, np.uint16),
        codes,
        rng.integers(0, 4, n).astype(np.uint8),
    )


def test_merged_records_are_every_request_on_one_clock() -> None:
    rng = np.random.default_rng(5)
    start = 1_800_000_000 * 10**9
    a = _records(rng, 3000, start, ["ok", "timeout"])
    # host b's clock runs 250 ms ahead of the controller's
    b = _records(rng, 2000, start + 250_000_000, ["ok", "UNAVAILABLE", "timeout"])
    merged = merge([a, b], [0, 250_000_000])
    assert len(merged) == 5000
    assert np.all(np.diff(merged.due_ns) >= 0)
    assert merged.due_ns.min() >= start and merged.due_ns.max() < start + 10**9
    # the percentiles are numpy's over every request, not a mix of the hosts'
    every = np.concatenate([a.latency_ns, b.latency_ns])
    for p in (50, 99, 99.9):
        assert np.percentile(merged.latency_ns, p) == np.percentile(every, p)
    # each outcome counted under its own name, whichever host's table it was in
    assert merged.codes == ["ok", "timeout", "UNAVAILABLE"]
    expected: dict[str, int] = {}
    for host in (a, b):
        for name, n in host.counts().items():
            expected[name] = expected.get(name, 0) + n
    assert merged.counts() == expected
    assert np.bincount(merged.ops).tolist() == np.bincount(np.r_[a.ops, b.ops]).tolist()


def _plans(workload: Workload, hosts: int) -> list[dict[str, object]]:
    from dbtester.control.spread import _plan
    from dbtester.databases import get_kind
    from dbtester.databases.base import LoadSettings

    settings = LoadSettings(
        endpoints=("10.0.0.1:2379",),
        client=get_kind("etcd").client_model().model_dump(),
        key_size=16,
        value_size=workload.value_size,
        consistency="linearizable",
        timeout_s=1.0,
        same_key=False,
    )
    shares = split(workload, hosts, write_id_base=workload.warmup_requests)
    return [dict(_plan("etcd", settings, workload, s, 1, 1, None, 0)) for s in shares]


def test_each_hosts_plan_writes_its_own_keys_at_its_rate() -> None:
    workload = _workload(requests=1001, clients=9, connections=3, rate=100, check={"clients": 2})
    plans = _plans(workload, 2)
    keys = [p["keys"] for p in plans]
    assert [(k["first"], k["insert_space"]) for k in keys] == [(0, 501), (501, 500)]  # type: ignore[index]
    assert [p["steps"] for p in plans] == [
        [{"clients": 5, "connections": 2, "requests": 501, "rate": 50.0}],
        [{"clients": 4, "connections": 1, "requests": 500, "rate": 50.0}],
    ]
    assert plans[0]["check"] == {"clients": 2, "keys": 8} and plans[1]["check"] is None
    assert [p["seed"] for p in plans] == [1, 2]


def test_a_mixed_loads_hosts_tag_their_writes_apart() -> None:
    workload = workload_of(
        **{
            "type": "mixed",
            "requests": 1000,
            "key_count": 500,
            "read_proportion": 0.5,
            "update_proportion": 0.5,
            "insert_proportion": 0,
            "clients": 4,
            "connections": 2,
            "value_size": 64,
            "warmup_requests": 10,
        }
    )
    plans = _plans(workload, 2)
    assert [p["write_id_base"] for p in plans] == [10, 510]
    # every host reads and updates the same key_count keys
    assert [p["keys"]["existing"] for p in plans] == [500, 500]  # type: ignore[index]
