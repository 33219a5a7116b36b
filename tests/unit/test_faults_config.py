"""The test case's `faults:`: durations, targets, and the schedule as a whole,
with the file:line:col a user sees."""

from __future__ import annotations

import pytest

from dbtester.config.faults import Fault, parse_duration
from dbtester.config.load import load_test_case_text
from dbtester.errors import ConfigError

CASE = """\
title: t
workload: {type: write, requests: 100, clients: 10, connections: 5}
databases:
  - {id: a, kind: etcd, version: 3.5.17}
  - {id: b, kind: etcd, version: 3.6.8, members: 5}
faults:
"""


def _load(faults: str) -> tuple[Fault, ...]:
    return load_test_case_text(CASE + faults, "case.yaml").case.faults


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("10s", 10.0), ("1.5s", 1.5), ("500ms", 0.5), ("2m", 120.0), (3, 3.0), (0.25, 0.25)],
)
def test_durations(written: object, seconds: float) -> None:
    assert parse_duration(written) == seconds


def test_a_schedule_that_kills_restarts_pauses_and_resumes() -> None:
    faults = _load(
        "  - {at: 2s, action: kill, member: leader}\n"
        "  - {at: 4s, action: restart}\n"
        "  - {at: 5s, action: pause, member: follower}\n"
        "  - {at: 5500ms, action: resume}\n"
    )
    assert [(f.at, f.action, f.member) for f in faults] == [
        (2.0, "kill", "leader"),
        (4.0, "restart", None),
        (5.0, "pause", "follower"),
        (5.5, "resume", None),
    ]
    assert faults[0].describe() == "kill leader at 2 s"
    kept = Fault.model_validate({"at": 1, "action": "isolate", "member": 0, "keep_clients": True})
    assert kept.describe() == "isolate member 0 from its peers at 1 s"
    # written back by `convert` and loaded again: the same schedule
    raw = load_test_case_text(CASE + "  - {at: 1, action: kill, member: 2}\n", "c.yaml").case
    assert raw.to_raw()["faults"] == [{"at": 1.0, "action": "kill", "member": 2}]


def test_a_slow_disk_and_its_restore() -> None:
    faults = _load(
        "  - {at: 2s, action: slow_disk, member: leader, fsync_ms: 20}\n"
        "  - {at: 3s, action: kill, member: 1}\n"
        "  - {at: 4s, action: restart}\n"
        "  - {at: 6s, action: restore_disk}\n"
    )
    assert [(f.action, f.fsync_ms) for f in faults] == [
        ("slow_disk", 20.0),
        ("kill", None),
        ("restart", None),
        ("restore_disk", None),
    ]
    assert faults[0].describe() == "slow_disk leader by 20 ms at 2 s"


@pytest.mark.parametrize(
    ("faults", "where", "words"),
    [
        ("  - {at: 2x, action: kill, member: 0}\n", "7:10", "'2x' is not a duration"),
        ("  - {at: 0s, action: kill, member: 0}\n", "7:10", "greater than 0"),
        (
            "  - {at: 1s, action: explode, member: 0}\n",
            "7:22",
            "'kill', 'restart', 'pause', 'resume', 'isolate', 'heal'",
        ),
        ("  - {at: 1s, action: kill}\n", "7:5", "kill needs a member"),
        ("  - {at: 1s, action: kill, member: -1}\n", "7:36", "counts from 0"),
        ("  - {at: 1s, action: kill, member: boss}\n", "7:36", "'leader', 'follower'"),
        ("  - {at: 1s, action: restart}\n", "7:3", "no kill in effect"),
        (
            "  - {at: 1s, action: pause, member: 0}\n  - {at: 2s, action: restart}\n",
            "7:3",
            "no kill in effect",
        ),
        (
            "  - {at: 1s, action: kill, member: 0}\n  - {at: 2s, action: restart, member: 0}\n",
            "8:5",
            "restart takes no member",
        ),
        (
            "  - {at: 3s, action: kill, member: 0}\n  - {at: 2s, action: restart}\n",
            "7:3",
            "in time order",
        ),
        # database a has 3 members: index 3 exists only in b
        ("  - {at: 1s, action: kill, member: 3}\n", "7:3", "member 3 does not exist"),
        ("  - {at: 1s, action: kill, member: 0, when: now}\n", "7:39", "unknown key 'when'"),
        ("  - {at: 1s, action: heal}\n", "7:3", "no isolate in effect"),
        ("  - {at: 1s, action: isolate}\n", "7:5", "isolate needs a member"),
        (
            "  - {at: 1s, action: kill, member: 0, keep_clients: true}\n",
            "7:5",
            "keep_clients is for isolate",
        ),
        (
            "  - {at: 1s, action: kill, member: 0}\n  - {at: 2s, action: heal}\n",
            "7:3",
            "faults[1] (heal at 2 s): there is no isolate in effect",
        ),
        (
            "  - {at: 1s, action: isolate, member: 0}\n  - {at: 2s, action: heal, member: 0}\n",
            "8:5",
            "heal takes no member",
        ),
        ("  - {at: 1s, action: slow_disk, member: 0}\n", "7:5", "slow_disk needs fsync_ms"),
        (
            "  - {at: 1s, action: slow_disk, member: 0, fsync_ms: 0}\n",
            "7:54",
            "greater than 0",
        ),
        (
            "  - {at: 1s, action: kill, member: 0, fsync_ms: 5}\n",
            "7:5",
            "fsync_ms is for slow_disk",
        ),
        ("  - {at: 1s, action: restore_disk}\n", "7:3", "no slow_disk in effect"),
        (
            "  - {at: 1s, action: slow_disk, member: all, fsync_ms: 5}\n",
            "7:5",
            "member: all is for defrag",
        ),
        # a write load's clients hold no sessions to crash
        (
            "  - {at: 1s, action: expire_session, lock: 0}\n",
            "7:3",
            "faults[0] (expire_session of lock 0's holder at 1 s): database a's load has no"
            " sessions for expire_session to expire (type: lock has)",
        ),
        ("  - {at: 1s, action: expire_session}\n", "7:5", "expire_session needs lock"),
        # the embedded databases run every member on this machine's loopback
        (
            "  - {at: 1s, action: isolate, member: 1}\n  - {at: 2s, action: heal}\n",
            "7:3",
            "faults[0] (isolate member 1 at 1 s): database a runs its members on this"
            " machine's loopback (no hosts:)",
        ),
    ],
)
def test_bad_faults_say_where_and_why(faults: str, where: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(faults)
    message = str(caught.value)
    assert f"case.yaml:{where}" in message and words in message, message


def test_faults_need_agents() -> None:
    text = CASE.replace(
        "  - {id: b, kind: etcd, version: 3.6.8, members: 5}",
        "  - {id: b, kind: etcd, version: 3.6.8, endpoints: ['10.0.0.1:2379']}",
    )
    with pytest.raises(ConfigError, match="faults need agents on the members: b only"):
        load_test_case_text(text + "  - {at: 1s, action: kill, member: 0}\n", "case.yaml")


HOSTS_CASE = """\
title: t
workload: {type: write, requests: 100, clients: 10, connections: 5}
databases:
  - id: spread
    kind: etcd
    version: 3.5.17
    hosts: [{address: 10.0.0.1}, {address: 10.0.0.2}, {address: 10.0.0.3}]
  - id: packed
    kind: etcd
    version: 3.5.17
    hosts: [{address: 10.0.1.1}, {address: 10.0.1.2}, {address: %s, agent_port: 3501}]
faults:
  - {at: 2s, action: kill, member: 0}
  - {at: 3s, action: isolate, member: %s}
  - {at: 5s, action: heal}
  - {at: 6s, action: restart}
"""


def test_isolate_and_heal_on_hosts_of_their_own() -> None:
    """Every member on a host of its own: any member may be isolated; heal and
    restart undo, latest first, what is still in effect."""
    faults = load_test_case_text(HOSTS_CASE % ("10.0.1.3", "leader"), "case.yaml").case.faults
    assert [(f.action, f.member) for f in faults] == [
        ("kill", 0),
        ("isolate", "leader"),
        ("heal", None),
        ("restart", None),
    ]
    assert faults[1].describe() == "isolate leader at 3 s" and faults[2].describe() == "heal at 5 s"


@pytest.mark.parametrize(
    ("address", "member", "words"),
    [
        # two members on one host: isolating either cuts the other off too
        (
            "10.0.1.2",
            "1",
            "faults[1] (isolate member 1 at 3 s): database packed: host 10.0.1.2 runs"
            " members 1 and 2; isolate cuts a whole host off the network, so member 1"
            " needs a host of its own",
        ),
        # the leader is named at run time: it may be either of them
        (
            "10.0.1.1",
            "leader",
            "database packed: host 10.0.1.1 runs members 0 and 2; isolate cuts a whole"
            " host off the network, so the leader is named only at run time: every member"
            " needs a host of its own",
        ),
        ("10.0.1.1", "follower", "so the follower is named only at run time"),
        # the rule keeps loopback traffic: on loopback it would cut nothing
        ("127.0.0.1", "0", "database packed runs its members on this machine's loopback"),
    ],
)
def test_isolate_refuses_a_member_without_a_host_of_its_own(
    address: str, member: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_test_case_text(HOSTS_CASE % (address, member), "case.yaml")
    message = str(caught.value)
    assert "case.yaml:13:3" in message and words in message, message


def test_isolate_of_a_member_alone_on_its_host_is_allowed_beside_shared_ones() -> None:
    # members 1 and 2 share 10.0.1.2; member 0 has 10.0.1.1 to itself
    faults = load_test_case_text(HOSTS_CASE % ("10.0.1.2", "0"), "case.yaml").case.faults
    assert faults[1].member == 0


def test_a_fault_due_after_an_open_loop_load_ends_is_refused() -> None:
    # 100 requests at 50/s last 2 s: a fault at 2 s or later could never happen
    case = CASE.replace("connections: 5}", "connections: 5, rate: 50}")
    text = case + "  - {at: 1s, action: kill, member: 0}\n  - {at: 2s, action: restart}\n"
    with pytest.raises(ConfigError) as caught:
        load_test_case_text(text, "case.yaml")
    message = str(caught.value)
    assert "case.yaml:7:3" in message, message  # faults: points at its first item
    assert "faults[1] (restart at 2 s): a's load lasts 2 s (100 requests at 50/s)" in message
    # one due inside it is fine; a closed loop's length is not known beforehand
    inside = case + "  - {at: 1s, action: kill, member: 0}\n  - {at: 1.9s, action: restart}\n"
    assert len(load_test_case_text(inside, "case.yaml").case.faults) == 2
    assert len(_load("  - {at: 1s, action: kill, member: 0}\n  - {at: 9s, action: restart}\n"))


def test_expire_session_needs_a_lock_the_load_has() -> None:
    lock_case = CASE.replace(
        "{type: write, requests: 100, clients: 10, connections: 5}",
        "{type: lock, requests: 100, lockers: 4, locks: 2}",
    )
    [fault] = load_test_case_text(
        lock_case + "  - {at: 1s, action: expire_session, lock: 1}\n", "case.yaml"
    ).case.faults
    assert (fault.action, fault.lock, fault.target) == ("expire_session", 1, None)
    with pytest.raises(ConfigError) as caught:
        load_test_case_text(lock_case + "  - {at: 1s, action: expire_session, lock: 2}\n", "c.yaml")
    assert "c.yaml:7:3" in str(caught.value)
    assert "database a's load has 2 lock(s), 0..1: there is no lock 2" in str(caught.value)
