"""The test case's `fault_recovery`: how long a load with faults may go with
no successful request before the run fails."""

from __future__ import annotations

import pytest

from dbtester.config.load import load_test_case_text
from dbtester.config.model import DEFAULT_FAULT_RECOVERY_S
from dbtester.errors import ConfigError

CASE = """\
title: t
workload: {type: write, requests: 100, clients: 10, connections: 5}
databases:
  - {id: a, kind: etcd, version: 3.5.17}
faults:
  - {at: 1s, action: kill, member: leader}
"""


def test_a_default_and_durations_as_at_takes_them() -> None:
    assert load_test_case_text(CASE, "c.yaml").case.fault_recovery == DEFAULT_FAULT_RECOVERY_S
    for written, seconds in (("45s", 45.0), ("1m", 60.0), ("2500ms", 2.5), ("12", 12.0)):
        case = load_test_case_text(CASE + f"fault_recovery: {written}\n", "c.yaml").case
        assert case.fault_recovery == seconds
        assert case.to_raw()["fault_recovery"] == seconds  # written back, loads the same


@pytest.mark.parametrize("written", ["0", "-5s", "soon", "3d"])
def test_a_bad_bound_is_refused_where_it_is_written(written: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_test_case_text(CASE + f"fault_recovery: {written}\n", "c.yaml")
    said = str(caught.value)
    assert said.startswith("c.yaml:7:17: ")  # at the value written
    assert "duration" in said or "greater than 0" in said
