"""Maintenance events in `faults:` (compact, defrag, snapshot,
transfer_leader): what each takes, the kinds that refuse one (at its line,
with what stands for it), and their windows' figures from made-up records."""

from __future__ import annotations

import numpy as np
import pytest

from dbtester.analyze.faults import fault_figures, fault_values, windows
from dbtester.config.faults import Fault
from dbtester.config.load import load_test_case_text
from dbtester.errors import ConfigError
from dbtester.results import FaultRecord, Records
from dbtester.util.keys import PREFILL_BATCH_BYTES, PREFIX, prefill_batches, prefill_key

CASE = """\
title: t
workload: {type: write, requests: 100, clients: 10, connections: 5}
databases:
  - {id: a, kind: etcd, version: 3.5.17}
  - {id: b, kind: KIND, version: VERSION}
faults:
"""
VERSION = {"etcd": "3.6.8", "consul": "1.22.0", "zookeeper": "3.8.0"}


def _load(faults: str, kind: str = "etcd") -> tuple[Fault, ...]:
    text = CASE.replace("KIND", kind).replace("VERSION", VERSION[kind]) + faults
    return load_test_case_text(text, "case.yaml").case.faults


def test_events_take_their_defaults_and_describe_themselves() -> None:
    faults = _load(
        "  - {at: 1s, action: compact, keep_revisions: 100}\n"
        "  - {at: 2s, action: defrag, member: all}\n"
        "  - {at: 3s, action: snapshot}\n"
        "  - {at: 4s, action: transfer_leader}\n"
        "  - {at: 5s, action: kill, member: leader}\n"
        "  - {at: 6s, action: defrag, member: 1}\n"
        "  - {at: 7s, action: restart}\n"
    )
    assert [f.describe() for f in faults] == [
        "compact keeping 100 at 1 s",
        "defrag all at 2 s",
        "snapshot leader at 3 s",
        "transfer_leader to follower at 4 s",
        "kill leader at 5 s",
        "defrag member 1 at 6 s",  # an event between a kill and its restart
        "restart at 7 s",
    ]
    assert [f.target for f in faults[:4]] == [None, "all", "leader", "follower"]


@pytest.mark.parametrize(
    ("faults", "where", "words"),
    [
        ("  - {at: 1s, action: compact, member: 0}\n", "7:5", "compact takes no member"),
        ("  - {at: 1s, action: transfer_leader, member: leader}\n", "7:5", "follower or an index"),
        ("  - {at: 1s, action: snapshot, member: all}\n", "7:5", "leader or follower or an index"),
        ("  - {at: 1s, action: kill, member: all}\n", "7:5", "member: all is for defrag"),
        ("  - {at: 1s, action: defrag, keep_revisions: 3}\n", "7:5", "keep_revisions is for"),
        ("  - {at: 1s, action: compact, keep_revisions: -1}\n", "7:47", "greater than or equal"),
        ("  - {at: 1s, action: defrag, member: 5}\n", "7:3", "member 5 does not exist"),
    ],
)
def test_bad_events_say_where_and_why(faults: str, where: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(faults)
    message = str(caught.value)
    assert f"case.yaml:{where}" in message and words in message, message


@pytest.mark.parametrize(
    ("kind", "action", "words"),
    [
        ("zookeeper", "defrag", "keeps its tree in memory"),
        ("zookeeper", "transfer_leader", "no leader transfer"),
        ("consul", "compact", "truncates its Raft log by itself"),
    ],
)
def test_a_kind_without_the_event_is_refused_with_what_stands_for_it(
    kind: str, action: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(f"  - {{at: 1s, action: {action}}}\n", kind)
    message = str(caught.value)
    assert "case.yaml:6:1" in message or "case.yaml:7" in message, message
    assert f"database b is {kind}, which has no {action}" in message
    assert words in message and "(etcd can)" in message, message


def test_consul_runs_a_snapshot_and_a_leader_transfer() -> None:
    faults = _load(
        "  - {at: 1s, action: snapshot, member: follower}\n"
        "  - {at: 2s, action: transfer_leader, member: 2}\n",
        "consul",
    )
    assert [f.action for f in faults] == ["snapshot", "transfer_leader"]


START = 1_700_000_000.0


def _event(at: float, took: float, action: str = "defrag", target: str = "all") -> FaultRecord:
    return FaultRecord(
        at_s=at,
        action=action,
        target=target,
        unix=START + at,
        end_unix=START + at + took,
        detail="member 0 20.0 to 5.0 MB",
    )


def test_an_event_is_a_window_of_its_own_from_its_start_to_its_end() -> None:
    kill = FaultRecord(at_s=1.0, action="kill", target="0", member=0, unix=START + 1.0)
    restart = FaultRecord(at_s=9.0, action="restart", target="", member=0, unix=START + 9.0)
    found = windows([kill, _event(3.0, 2.5), restart], START)
    assert [(w.number, w.fault.action, w.start_s, w.end_s, w.event) for w in found] == [
        (1, "kill", 1.0, 9.0, False),
        (2, "defrag", 3.0, 5.5, True),
    ]
    assert found[1].describe() == "defrag all at 3 s"
    move = windows([_event(2.0, 0.1, "transfer_leader", "follower")], START)[0]
    assert move.describe() == "transfer_leader to follower at 2 s"


def test_an_events_figures_say_how_long_it_took_and_the_stall_inside_it() -> None:
    # 1,000 successes a second, none from 10.0 to 12.0 while a defrag ran
    # from 10.0 to 12.0; each request 2 ms, the ones completing just after
    # it 200 ms (they waited)
    done = np.concatenate([np.arange(0, 10, 0.001), np.arange(12.0, 20, 0.001)])
    latency = np.full(len(done), 2_000_000, np.int64)
    latency[(done >= 12.0) & (done < 12.01)] = 200_000_000
    due = ((START + done) * 1e9).astype(np.int64) - latency
    records = Records(
        due,
        latency,
        latency,
        np.zeros(len(done), np.uint8),
        np.zeros(len(done), np.uint16),
        ["ok"],
    )
    (f,) = fault_figures(records, [_event(10.0, 2.0)], START)
    assert (f.start_s, f.end_s, f.took_s, f.detail) == (10.0, 12.0, 2.0, "member 0 20.0 to 5.0 MB")
    assert f.unavailable_s == pytest.approx(2.0, abs=0.002)
    assert f.p99_before_ms == pytest.approx(2.0) and f.p99_during_ms is None
    assert f.slowest_ms == pytest.approx(200.0)
    values = fault_values(f)
    assert values["FAULT-1-TOOK-SECONDS"] == 2.0 and values["FAULT-1"] == "defrag all at 10 s"
    kill = FaultRecord(at_s=1.0, action="kill", target="0", member=0, unix=START + 1.0)
    (k,) = fault_figures(records, [kill], START)
    assert "FAULT-1-TOOK-SECONDS" not in fault_values(k)


@pytest.mark.parametrize(
    ("count", "value_size", "most"),
    [(1000, 1024, 128), (10, 1 << 20, 64), (0, 10, 500), (1001, 0, 500)],
)
def test_the_prefill_batches_cover_every_key_once_within_the_limits(
    count: int, value_size: int, most: int
) -> None:
    batches = prefill_batches(count, value_size, most)
    numbers = [n for batch in batches for n in batch]
    assert numbers == list(range(count))
    assert all(0 < len(b) <= most for b in batches)
    # a batch's values stay under the bound, but a single key always goes
    assert all(len(b) == 1 or len(b) * value_size <= PREFILL_BATCH_BYTES for b in batches)


def test_prefilled_keys_are_apart_from_the_loads() -> None:
    assert prefill_key(7) == "p000000000000007" and len(prefill_key(10**14)) == 16
    assert not prefill_key(0).encode().startswith(PREFIX)
    case = load_test_case_text(
        CASE.replace("KIND", "etcd")
        .replace("VERSION", "3.6.8")
        .replace("connections: 5}", "connections: 5, prefill_keys: 1000}")
        .removesuffix("faults:\n"),
        "case.yaml",
    ).case
    assert (case.workload.prefill_keys, case.workload.prefill_value_size) == (1000, 1024)


UPGRADE_CASE = """\
title: t
workload: {type: write, requests: 100, clients: 10, connections: 5}
databases:
  - {id: a, kind: etcd, version: FROM}
faults:
"""


def _upgrades(running: str, faults: str, more: str = "") -> tuple[Fault, ...]:
    text = UPGRADE_CASE.replace("FROM", running).replace("faults:\n", more + "faults:\n")
    return load_test_case_text(text + faults, "case.yaml").case.faults


def test_a_rolling_upgrade_is_three_events_member_by_member() -> None:
    faults = _upgrades(
        "3.5.21",
        '  - {at: 2s, action: upgrade, member: 0, to: "3.6.8"}\n'
        '  - {at: 6s, action: upgrade, member: 1, to: "3.6.8"}\n'
        '  - {at: 10s, action: upgrade, member: 2, to: "3.6.8"}\n',
    )
    assert [f.describe() for f in faults] == [
        "upgrade member 0 to 3.6.8 at 2 s",
        "upgrade member 1 to 3.6.8 at 6 s",
        "upgrade member 2 to 3.6.8 at 10 s",
    ]


@pytest.mark.parametrize(
    ("running", "faults", "words"),
    [
        ("3.5.17", '  - {at: 1s, action: upgrade, member: 0, to: "3.6.8"}\n', "3.5.20 or later"),
        ("3.4.23", '  - {at: 1s, action: upgrade, member: 0, to: "3.6.8"}\n', "one minor version"),
        ("3.6.8", '  - {at: 1s, action: upgrade, member: 0, to: "3.6.8"}\n', "runs 3.6.8 already"),
        ("3.6.8", '  - {at: 1s, action: upgrade, member: 0, to: "3.5.21"}\n', "a downgrade"),
        # the second step starts from what the first left: 3.6.8 again
        (
            "3.5.21",
            '  - {at: 1s, action: upgrade, member: 0, to: "3.6.8"}\n'
            '  - {at: 2s, action: upgrade, member: 0, to: "3.6.8"}\n',
            "faults[1] (upgrade member 0 to 3.6.8 at 2 s): database a runs 3.6.8",
        ),
        ("3.5.21", "  - {at: 1s, action: upgrade, member: 0}\n", "upgrade needs to:"),
        ("3.5.21", '  - {at: 1s, action: upgrade, to: "3.6.8"}\n', "upgrade needs a member"),
        ("3.5.21", '  - {at: 1s, action: kill, member: 0, to: "3.6.8"}\n', "to is for upgrade"),
        ("3.5.21", '  - {at: 1s, action: snapshot, to: "3.6.8"}\n', "to is for upgrade"),
    ],
)
def test_upgrades_the_kind_forbids_are_refused(running: str, faults: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _upgrades(running, faults)
    assert words in str(caught.value), str(caught.value)


def test_an_upgrade_needs_databases_of_one_kind() -> None:
    other = "  - {id: z, kind: zookeeper, version: 3.8.0}\n"
    with pytest.raises(ConfigError, match="databases are etcd, zookeeper"):
        load_test_case_text(
            UPGRADE_CASE.replace("FROM", "3.5.21").replace("faults:\n", other + "faults:\n")
            + '  - {at: 1s, action: upgrade, member: 0, to: "3.6.8"}\n',
            "case.yaml",
        )


def test_the_upgraded_versions_are_what_the_case_needs_installed() -> None:
    case = load_test_case_text(
        UPGRADE_CASE.replace("FROM", "3.5.21")
        + '  - {at: 1s, action: upgrade, member: 0, to: "3.6.8"}\n'
        + '  - {at: 2s, action: upgrade, member: 1, to: "3.6.8"}\n',
        "case.yaml",
    ).case
    assert case.versions_of(case.databases[0]) == ["3.5.21", "3.6.8"]


@pytest.mark.parametrize(
    "fault",
    [
        "  - {at: 1s, action: kill, member: follower}\n  - {at: 2s, action: restart}\n",
        "  - {at: 1s, action: transfer_leader}\n",
        "  - {at: 1s, action: snapshot, member: follower}\n",
    ],
)
def test_a_one_member_database_has_no_follower(fault: str) -> None:
    text = UPGRADE_CASE.replace("FROM", "3.5.21").replace("3.5.21}", "3.5.21, members: 1}")
    with pytest.raises(ConfigError, match="has 1 member, and so no follower"):
        load_test_case_text(text + fault, "case.yaml")
