"""Checked clients against the etcd stand-in: an honest one's history is
linearizable; one that serves stale reads, and one that loses acknowledged
writes, are each caught with the operations involved named."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbtester.analyze.correctness import judge
from dbtester.databases.base import LoadSettings
from dbtester.load import LoadOptions, run_load
from dbtester.results import CheckedOperations, CorrectnessRecord, DatabaseLayout
from dbtester.workloads import workload_of
from dbtester.workloads.check import Check
from tests.standins.etcd import EtcdStandIn, Misbehave

pytestmark = pytest.mark.integration

CHECK = Check(clients=4, keys=2)


def _checked(tmp_path: Path, misbehave: Misbehave) -> CorrectnessRecord:
    with EtcdStandIn(misbehave) as etcd:
        settings = LoadSettings(
            (etcd.endpoint,), {"balancer": "pick_first"}, 16, 32, "linearizable", 2.0
        )
        # the measured load: 1,000 puts in 2 s, the checked clients beside it
        workload = workload_of(
            type="write", requests=1000, rate=500.0, key_size=16, value_size=32, check=CHECK
        )
        layout = DatabaseLayout(tmp_path / "db")
        result = run_load("etcd", settings, workload, layout, LoadOptions(progress=None))
    assert result.check is not None
    # saved beside the load's records, and read back the same
    saved = CheckedOperations.load(layout.check_history)
    assert len(saved) == len(result.check) > 100
    # none of the checked clients' requests is among the load's
    assert len(result.records) == 1000
    return judge(result.check, clients=4, keys=2, on_violation="fail", serializable=False)


def test_an_honest_server_is_linearizable(tmp_path: Path) -> None:
    record = _checked(tmp_path, Misbehave())
    assert record.linearizable and record.violation is None
    assert record.linearizable_keys == 2 and record.violated_keys == 0


def test_stale_reads_are_caught_with_their_operations(tmp_path: Path) -> None:
    record = _checked(tmp_path, Misbehave(stale=True))
    assert record.violated_keys >= 1 and record.violation is not None
    involved = record.violation.operations
    assert {op.kind for op in involved} == {"read", "write"}
    assert len({op.value for op in involved}) >= 2  # the value read, the one it missed
    # each named with the member that served it: the stand-in is member 0
    assert {op.member for op in involved} == {0}
    assert record.violation.key in ("c0", "c1")


def test_lost_acknowledged_writes_are_caught(tmp_path: Path) -> None:
    record = _checked(tmp_path, Misbehave(lose_writes=0.3))
    assert record.violation is not None
    # a write acknowledged but never stored: some read could not see it
    assert any(op.kind == "write" and op.outcome == "ok" for op in record.violation.operations)
