"""``repeat: auto`` end to end through ``dbtester run``: two databases that
differ plainly (the second capped at a rate far under what it serves) are
decided after the first look, and the run says so in its console lines and
result.json. The databases are etcd stand-ins given as endpoints (load only),
so rounds take a second, not a cluster's start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.standins.etcd import EtcdStandIn
from tests.support.cases import database, make_case

pytestmark = pytest.mark.integration


def _case(first: str, second: str, **top: object) -> dict[str, object]:
    return make_case(
        title="auto",
        workload={"requests": 300, "key_size": 16, "value_size": 64}
        | {"clients": 8, "connections": 2},
        databases=[
            database("a", endpoints=[first]),
            database("b", endpoints=[second], workload={"rate": 150}),
        ],
        repeat="auto",
        **top,
    )


def test_a_plain_difference_is_decided_early(tmp_path: Path, run_cli) -> None:
    # Throughput alone: p99 of two stand-ins, one far less loaded, is noise.
    with EtcdStandIn() as a, EtcdStandIn() as b:
        case = tmp_path / "case.yaml"
        top = {"max_trials": 6, "stopping_metrics": ["AVG-THROUGHPUT"]}
        case.write_text(yaml.safe_dump(_case(a.endpoint, b.endpoint, **top)))
        out = tmp_path / "out"
        result = run_cli("run", "--no-charts", str(case), "--out", str(out))
    assert result.code == 0, result.err[-2000:]
    summary = json.loads((out / "result.json").read_text())
    sequential = summary["sequential"]
    # 20 times slower: decided at the first or second look (a look after
    # three pairs has a t interval of 2 degrees of freedom, very wide).
    assert sequential["stopped"] == "decided" and sequential["trials"] in (3, 4)
    (look,) = sequential["looks"]
    assert (look["row"], look["verdict"], look["trials"]) == (
        "AVG-THROUGHPUT",
        "slower",
        sequential["trials"],
    )
    assert look["high_pct"] < 0
    assert "repeat: auto: b against a: AVG-THROUGHPUT" in result.err
    comparison = (out / "comparison.txt").read_text()
    assert "repeat: auto stopped after" in comparison
    assert "as every stopping metric was decided" in comparison
    trials = sequential["trials"]
    assert [db["trials"] for db in summary["databases"]] == [trials, trials]


def test_the_time_budget_ends_the_trials(tmp_path: Path, run_cli) -> None:
    # Equal databases are not decided after 3 rounds; a budget of 1 s ends the
    # run after the round in which it ran out, but never before the first
    # look (3 rounds): a busy machine once spent it in the first round, and
    # the run had no verdict at all.
    with EtcdStandIn() as a, EtcdStandIn() as b:
        case = _case(a.endpoint, b.endpoint, time_budget="1s", max_trials=10)
        case["databases"][1].pop("workload")  # type: ignore[index]
        path = tmp_path / "case.yaml"
        path.write_text(yaml.safe_dump(case))
        out = tmp_path / "out"
        result = run_cli("run", "--no-charts", str(path), "--out", str(out))
    assert result.code == 0, result.err[-2000:]
    sequential = json.loads((out / "result.json").read_text())["sequential"]
    # The budget is read on the run's clock after each round; a busy machine
    # only makes rounds slower, so it is spent sooner, never later. What this
    # relies on is that ten rounds take more than 1 s on any machine (each
    # runs two loads of 300 requests and saves and analyses their results).
    assert sequential["stopped"] == "time_budget"
    assert 3 <= sequential["trials"] < 10 and sequential["looks"], sequential
    assert "the time budget (1 s) is spent" in result.err
