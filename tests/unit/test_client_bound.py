"""The 'client was the bottleneck' note, from both sides' CPU and the cores."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from dbtester.analyze.figures import client_bound, compute
from tests.unit.test_analysis import START, _data


def _with_cpu(client: float, member: float, *, shared: bool, cores: int = 2, workers: int = 1):
    data = _data()
    seconds = range(12)
    frame = pd.DataFrame(
        {
            "unix_ms": [int((START + s) * 1000) for s in seconds],
            "cpu_percent": [client] * 12,
            "rss_bytes": [1] * 12,
            "receive_bytes": [0] * 12,
            "transmit_bytes": [0] * 12,
            "requests_done": [1000 * (s + 1) for s in seconds],
            "errors": [0] * 12,
        }
    )
    frame["t"] = frame["unix_ms"] / 1000 - START
    servers = [server.assign(cpu_percent=member) for server in data.servers]
    record = data.record.model_copy(
        update={
            "embedded": shared,
            "load": data.record.load.model_copy(update={"workers": workers}),  # type: ignore[union-attr]
        }
    )
    return replace(data, client=frame, servers=servers, record=record, client_cores=cores)


@pytest.mark.parametrize(
    ("client", "member", "shared", "bound"),
    [
        (130.0, 17.0, True, True),  # the Python client of dbtester 0.1 on the demo
        (30.0, 45.0, True, False),  # a cheap client: the members take the machine
        (95.0, 20.0, True, True),  # one engine thread saturated
        (60.0, 10.0, True, False),  # neither the thread nor the machine is busy
        (95.0, 80.0, False, True),  # remote: only the client's own thread counts
        (50.0, 80.0, False, False),
    ],
)
def test_client_bound_both_ways(client: float, member: float, shared: bool, bound: bool) -> None:
    data = _with_cpu(client, member, shared=shared)
    note = client_bound(data)
    assert (note is not None) is bound, note
    if bound:
        assert "the client was the bottleneck" in str(note)
        assert any("the client was the bottleneck" in n for n in compute(data).notes)


def test_a_client_using_less_than_the_members_is_never_the_bottleneck() -> None:
    # 3 members at 60% each (180%) against a client at 100% on 2 shared cores
    assert client_bound(_with_cpu(100.0, 60.0, shared=True)) is None


def test_no_cores_known_no_verdict() -> None:
    assert client_bound(_with_cpu(190.0, 1.0, shared=True, cores=0)) is None
