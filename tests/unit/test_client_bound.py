"""The 'client was the bottleneck' note, from both sides' CPU and the cores."""

from __future__ import annotations

import pytest

from dbtester.analyze.figures import client_bound, compute
from tests.support.data import with_cpu


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
    data = with_cpu(client, member, shared=shared)
    note = client_bound(data)
    assert (note is not None) is bound, note
    if bound:
        assert "the client was the bottleneck" in str(note)
        assert any("the client was the bottleneck" in n for n in compute(data).notes)


def test_a_client_using_less_than_the_members_is_never_the_bottleneck() -> None:
    # 3 members at 60% each (180%) against a client at 100% on 2 shared cores
    assert client_bound(with_cpu(100.0, 60.0, shared=True)) is None


def test_no_cores_known_no_verdict() -> None:
    assert client_bound(with_cpu(190.0, 1.0, shared=True, cores=0)) is None
