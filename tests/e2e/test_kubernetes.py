"""`type: kubernetes` on a real 3-member etcd: kube-apiserver's gets,
paginated lists and optimistic creates, updates and deletes, end to end
through `dbtester run` (its load phase, the first list, every verb's rows,
the objects verified), and the conflicts the engine counts held against
what etcd itself applied."""

from __future__ import annotations

import functools
import json
import math
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import yaml

from dbtester.analyze.compactions import compaction_values
from dbtester.analyze.correctness import judge_informers
from dbtester.databases import KINDS
from dbtester.load.runner import LoadOptions, LoadResult, load_keys, run_load
from dbtester.results import OPERATIONS, DatabaseLayout, InformerLags, Records
from dbtester.workloads import Workload, workload_of
from dbtester.workloads.kubernetes import VERBS
from tests.standins.watch_proxy import DroppingProxy, StallingProxy, WatchProxy
from tests.support.cluster import VERSIONS, cluster, dbtester, settings_for
from tests.support.poll import poll_until

pytestmark = pytest.mark.integration

OBJECTS, REQUESTS, PAGE = 200, 2000, 40
QUIET = LoadOptions(progress=None)


def test_every_verb_runs_and_the_objects_are_verified(tmp_path: Path, installed_home) -> None:
    home = Path(installed_home("etcd", VERSIONS["etcd"]))
    case = {
        "title": "kubernetes traffic",
        "workload": {
            "type": "kubernetes",
            "requests": REQUESTS,
            "objects": OBJECTS,
            "object_size": 512,
            "namespaces": 4,
            "page_size": PAGE,
            "clients": 16,
            "connections": 4,
            "get_proportion": 0.2,
            "list_proportion": 0.05,
            "create_proportion": 0.15,
            "update_proportion": 0.35,
            "delete_proportion": 0.15,
            "event_proportion": 0.1,
        },
        "databases": [
            {"id": "etcd", "kind": "etcd", "version": VERSIONS["etcd"], "members": 3},
        ],
    }
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(case))
    out = tmp_path / "results"
    result = dbtester(home, "run", str(path), "--out", str(out), "--no-charts")
    assert result.returncode == 0, result.stderr[-3000:]
    db = json.loads((out / "result.json").read_text())["databases"][0]
    figures = db["figures"]
    # The objects at the end are what the acknowledged writes imply.
    assert db["passed"] and figures["KEYS-VERIFIED"].endswith("OK"), figures["KEYS-VERIFIED"]
    assert figures["CLIENT-ERROR-COUNT"] == 0
    for verb in VERBS:
        assert figures[f"{verb.upper()}-THROUGHPUT"] > 0, verb
        assert figures[f"{verb.upper()}-Latency p99"] > 0, verb
    records = Records.load(out / "etcd" / "client-latency.npz")
    ops = [OPERATIONS[i] for i in records.ops]
    assert set(ops) == set(VERBS)
    # A draw's share, within 5 points (a 2,000-request run's draw is within
    # about 2; skipped creates and deletes become updates, at most a few)
    assert abs(ops.count("get") / REQUESTS - 0.2) < 0.05
    assert abs(ops.count("list") / REQUESTS - 0.05) < 0.05
    run = json.loads((out / "etcd" / "run.json").read_text())
    counters = run["load"]["counters"]
    # Every list is at least as many pages as the fewest objects allow (half
    # of OBJECTS), each page at most PAGE objects.
    lists = ops.count("list")
    assert counters["list_pages"] >= lists * math.ceil(OBJECTS / 2 / PAGE)
    assert counters["list_objects"] <= counters["list_pages"] * PAGE
    assert counters["update_retries"] <= counters["update_conflicts"]
    assert figures["LIST-PAGES"] == counters["list_pages"]
    # events: leased a lease per 60 s or 1,000 events (a run of seconds:
    # one lease per 1,000), none expiring within the hour they live
    events = ops.count("event")
    assert figures["EVENT-LEASES"] == counters["event_leases"] == math.ceil(events / 1000)
    assert figures["EVENT-EXPIRATIONS"] == 0 and figures["EXPIRATIONS-PER-S-MAX"] == 0
    # The count stayed within its bounds, and etcd holds what the table says.
    found = run["verification"]["found"]
    assert OBJECTS // 2 <= found <= OBJECTS * 3 // 2
    assert run["verification"]["expected_min"] <= found <= run["verification"]["expected_max"]
    # ... object by object: a list after the load against the engine's table
    assert counters["objects_lost"] == counters["objects_unexpected"] == 0, counters
    assert figures["LIST-PAGES-PER-S"] > 0
    assert figures["GET-Latency max"] >= figures["GET-Latency p99"]
    assert any("load phase wrote 200 keys" in note for note in run["notes"]), run["notes"]


def _metric(endpoint: str, name: str) -> float:
    """A counter of etcd's /metrics (on its client port), summed over labels."""
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    values = re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    assert values, f"{name} is not among etcd's metrics"
    return sum(float(v) for v in values)


def test_update_conflicts_are_the_failed_compares_etcd_applied(
    tmp_path: Path, installed_home
) -> None:
    """20 clients updating 10 objects: many updates find the object changed
    since they last saw it, and are sent again with what the failure read.
    Every transaction with a put is a Raft proposal whether its compare held
    or not, and only one that held puts: on a member, proposals applied less
    puts made over the load are the failed compares, which is what
    UPDATE-CONFLICTS counts."""
    home = installed_home("etcd", VERSIONS["etcd"])
    with cluster("etcd", 3, tmp_path, home) as (peers, _):
        settings = settings_for(peers, client={"balancer": "round_robin"}, value_size=128)
        workload = workload_of(
            type="kubernetes",
            requests=1000,
            objects=10,
            object_size=128,
            clients=20,
            connections=4,
            get_proportion=0.0,
            list_proportion=0.0,
            create_proportion=0.0,
            update_proportion=1.0,
            delete_proportion=0.0,
        )
        load_keys("etcd", settings, workload, QUIET)
        endpoint = settings.endpoints[0]
        before = [
            _metric(endpoint, m)
            for m in ("etcd_server_proposals_applied_total", "etcd_mvcc_put_total")
        ]
        result = run_load("etcd", settings, workload, DatabaseLayout(tmp_path / "out"), QUIET)
        assert result.records.counts() == {"ok": 1000}
        conflicts = result.counters["update_conflicts"]
        assert conflicts > 0, "20 clients over 10 objects never conflicted"
        assert result.counters["update_retries"] == conflicts  # nothing deleted them

        def applied() -> tuple[float, float]:
            proposals, puts = (
                _metric(endpoint, m) - b
                for m, b in zip(
                    ("etcd_server_proposals_applied_total", "etcd_mvcc_put_total"),
                    before,
                    strict=True,
                )
            )
            return proposals, puts

        # the member may apply the last entries a moment after the leader answered
        poll_until(lambda: applied()[1] >= 1000, 10, interval_s=0.1, message="puts not applied")
        proposals, puts = applied()
        assert puts == 1000
        assert proposals - puts == conflicts
        assert KINDS["etcd"].count_keys(settings, workload.key_prefix) == 10


def test_the_apiservers_compactor_compacts_and_lists_survive_it(
    tmp_path: Path, installed_home
) -> None:
    """Compaction every second under lists of 30 pages: etcd's compact key
    holds the claims, history before the last compaction is gone, and no
    list failed (one whose pinned revision was compacted away is made again
    whole, as client-go's pager does)."""
    import grpc

    from dbtester.databases.base import PLAIN
    from dbtester.databases.etcd_client import channel
    from dbtester.proto import etcd_pb2, etcd_pb2_grpc

    home = installed_home("etcd", VERSIONS["etcd"])
    with cluster("etcd", 3, tmp_path, home) as (peers, _):
        settings = settings_for(peers, client={"balancer": "round_robin"}, value_size=256)
        workload = workload_of(
            type="kubernetes",
            requests=1500,
            rate=300.0,
            objects=300,
            object_size=256,
            page_size=10,
            clients=20,
            connections=4,
            get_proportion=0.0,
            list_proportion=0.3,
            create_proportion=0.0,
            update_proportion=0.7,
            delete_proportion=0.0,
            compaction_interval="1s",
        )
        load_keys("etcd", settings, workload, QUIET)
        result = run_load("etcd", settings, workload, DatabaseLayout(tmp_path / "out"), QUIET)
        assert result.records.counts() == {"ok": 1500}
        compactions = result.counters["compactions"]
        assert compactions >= 2, result.counters  # 5 s of load, the first claim compacts nothing
        with channel(settings.endpoints[0], PLAIN) as open_channel:
            kv = etcd_pb2_grpc.KVStub(open_channel)
            claims = kv.Range(etcd_pb2.RangeRequest(key=b"compact_rev_key"), timeout=10).kvs
            assert claims and claims[0].version == compactions + 1, (claims, compactions)
            with pytest.raises(grpc.RpcError) as compacted:
                kv.Range(etcd_pb2.RangeRequest(key=b"/registry/", revision=2), timeout=10)
            assert compacted.value.code() == grpc.StatusCode.OUT_OF_RANGE
            # each compaction is on record, in order, timed within the load;
            # the last one's revision is the oldest etcd still serves
            done = result.compactions
            assert len(done) == compactions
            revisions = [c.revision for c in done]
            assert revisions == sorted(set(revisions)), revisions
            assert all(c.started_unix <= c.ended_unix for c in done)
            # the compactor starts with the engine, before the load's first
            # request: 10 s is this test's margin for connecting, not a promise
            assert result.started_unix - 10 < done[0].started_unix
            assert done[-1].ended_unix <= result.ended_unix
            last = done[-1].revision
            kv.Range(etcd_pb2.RangeRequest(key=b"/registry/", revision=last), timeout=10)
            with pytest.raises(grpc.RpcError) as before:
                kv.Range(etcd_pb2.RangeRequest(key=b"/registry/", revision=last - 1), timeout=10)
            assert before.value.code() == grpc.StatusCode.OUT_OF_RANGE
        # the rows: the longest compaction and the latency on either side
        values = compaction_values(done, result.records)
        longest = max(c.ended_unix - c.started_unix for c in done)
        assert values["COMPACTION-SECONDS-MAX"] == longest
        assert values["COMPACTION-P99-OUTSIDE-MS"] > 0


def test_informers_converge_through_compactions_and_a_leader_kill(
    tmp_path: Path, installed_home
) -> None:
    """Three informers beside the traffic while the apiserver's compactor
    runs every second and the leader is killed and restarted: each lists,
    watches, sees every write (no event twice or out of order), and ends on
    exactly a fresh list of the objects; their events' lags are timed."""
    home = Path(installed_home("etcd", VERSIONS["etcd"]))
    case = {
        "title": "informers",
        "workload": {
            "type": "kubernetes",
            "requests": 2400,
            "rate": 400,
            "objects": OBJECTS,
            "object_size": 256,
            "page_size": PAGE,
            "clients": 16,
            "connections": 4,
            "compaction_interval": "1s",
            "informers": 3,
        },
        "faults": [
            {"at": "1s", "action": "kill", "member": "leader"},
            {"at": "3s", "action": "restart"},
        ],
        "databases": [
            {
                "id": "etcd",
                "kind": "etcd",
                "version": VERSIONS["etcd"],
                "members": 3,
                "client": {"balancer": "round_robin"},
            },
        ],
    }
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(case))
    out = tmp_path / "results"
    result = dbtester(home, "run", str(path), "--out", str(out), "--no-charts")
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    assert figures["INFORMERS-CONVERGED"] == "3 / 3 OK", figures["INFORMERS-CONVERGED"]
    run = json.loads((out / "etcd" / "run.json").read_text())
    # judged without a check: key, as check: {model: informer} judges
    assert run["correctness"]["model"] == "informer" and run["correctness"]["violation"] is None
    assert figures["CORRECTNESS"] == f"informers held ({figures['INFORMER-EVENTS']:,} events)"
    informers = run["load"]["informers"]
    assert len(informers) == 3
    for informer in informers:
        assert informer["converged"] and not informer["problems"], informer
        assert 0 < informer["synced_s"] < 30, informer
    # an informer that never listed again saw every write acknowledged
    # during the load as an event (each create, update and delete is one;
    # the kill's unknown outcomes may add some; a relist replaces events by
    # a list)
    records = Records.load(out / "etcd" / "client-latency.npz")
    writes = [OPERATIONS.index(verb) for verb in ("create", "update", "delete")]
    acknowledged = int(((records.code == 0) & np.isin(records.ops, writes)).sum())
    watched = [i for i in informers if not i["relists"]]
    assert all(i["events"] >= acknowledged for i in watched), (acknowledged, informers)
    assert figures["INFORMER-EVENTS"] == sum(i["events"] for i in informers)
    # the one on the killed member watched again (elsewhere, or after a relist)
    assert sum(i["resumes"] + i["relists"] for i in informers) >= 1, informers
    lags = InformerLags.load(out / "etcd" / "informer-lags.npz")
    assert len(lags) > 0 and set(lags.informer.tolist()) == {0, 1, 2}
    assert figures["INFORMER-LAG-P99-MS"] == pytest.approx(float(np.percentile(lags.lag_ms(), 99)))
    assert figures["INFORMER-LAG-P50-MS"] <= figures["INFORMER-LAG-P99-MS"]
    print(
        "informers:",
        [(i["events"], i["relists"], i["resumes"], round(i["synced_s"], 3)) for i in informers],
        f"lag p99 {figures['INFORMER-LAG-P99-MS']:.1f} ms",
    )


def _behind_a_proxy(**keys: Any) -> Workload:
    """A small Kubernetes load on 100 objects, without lists, for a proxy."""
    base = {"objects": 100, "object_size": 128, "page_size": 30, "clients": 4}
    return workload_of(
        type="kubernetes",
        **base,
        connections=2,
        list_proportion=0.0,
        **{"compaction_interval": 0, **keys},
    )


P = TypeVar("P", bound=WatchProxy)
T = TypeVar("T")


def _through(
    proxy: Callable[[str], P],
    installed_home: Callable[..., Any],
    tmp_path: Path,
    workload: Workload,
    seen: Callable[[P], T],
) -> tuple[LoadResult, T]:
    """``workload`` on a 1-member etcd, loaded directly and run through
    ``proxy``, and what ``seen`` reads off the proxy at the end."""
    home = installed_home("etcd", VERSIONS["etcd"])
    with cluster("etcd", 1, tmp_path, home) as (peers, _):
        load_keys("etcd", settings_for(peers, value_size=128), workload, QUIET)
        with proxy(peers[0].address("client")) as standin:
            settings = settings_for(peers, endpoints=(standin.endpoint,), value_size=128)
            result = run_load("etcd", settings, workload, DatabaseLayout(tmp_path / "out"), QUIET)
            return result, seen(standin)


def test_the_informer_check_names_the_object_a_dropped_event_left(
    tmp_path: Path, installed_home
) -> None:
    """Two informers watch a real etcd through a proxy that drops the first
    delete event any watch carries. Names are never reused, so the informer
    that missed it keeps the object to the end: its copy is not the fresh
    list, and check: {model: informer} names that informer and the object;
    the other informer, which saw everything, converged."""
    shape = {"get_proportion": 0.1, "create_proportion": 0.2, "update_proportion": 0.4}
    workload = _behind_a_proxy(requests=400, delete_proportion=0.3, informers=2, **shape)
    proxy = DroppingProxy
    result, dropped = _through(proxy, installed_home, tmp_path, workload, lambda p: p.dropped)
    assert dropped is not None, "no delete event passed the proxy"
    key, _ = dropped
    assert result.records.counts().get("ok", 0) > 0
    wrong = [n for n, i in enumerate(result.informers) if i.problems]
    assert len(wrong) == 1, result.informers
    missed = result.informers[wrong[0]]
    assert missed.converged and missed.problem_count == 1, missed
    assert missed.problems[0].startswith(f"{key} (revision "), missed.problems
    assert "is still there, gone from the list" in missed.problems[0]
    other = result.informers[1 - wrong[0]]
    assert other.converged and not other.problems, other
    judged = judge_informers(result.informers, on_violation="fail")
    assert judged.violation is not None and judged.violated_keys == 1
    assert judged.violation.key == f"informer {wrong[0]}"
    assert key in judged.violation.reason


def test_an_informer_whose_watch_was_compacted_away_lists_again(
    tmp_path: Path, installed_home
) -> None:
    """One informer watches a real etcd, compacted every second, through a
    proxy that holds its watch for 3 s after the first event and then ends
    it, as a stalled connection would: the informer resumes from one past
    the last revision it saw, etcd answers that the revision was compacted
    away, the informer lists again, and it still ends on exactly the
    objects there are."""
    workload = _behind_a_proxy(
        requests=1000, rate=200, get_proportion=0.2, compaction_interval=1, informers=1
    )
    proxy = functools.partial(StallingProxy, hold_s=3.0)
    result, stalled = _through(proxy, installed_home, tmp_path, workload, lambda p: p.stalled)
    assert stalled is not None, "no watch event passed the proxy"
    assert len(result.compactions) >= 3, result.compactions
    # the compaction that took the informer's resume point: one after the stall
    assert max(c.revision for c in result.compactions) > stalled + 1
    [informer] = result.informers
    assert informer.relists >= 1 and informer.resumes >= 1, informer
    assert informer.converged and not informer.problems, informer


def test_events_are_leased_and_expire_with_their_lease(tmp_path: Path, installed_home) -> None:
    """Half the requests create events with a 1-s TTL, a lease reused for
    1 s or 100 events: leases are granted as the apiserver's lease manager
    grants them, the watcher counts the events that expire during the load
    (at most those created), and after the load every event is gone, which
    only a lease attached to each can do (the load deletes none)."""
    home = installed_home("etcd", VERSIONS["etcd"])
    with cluster("etcd", 1, tmp_path, home) as (peers, _):
        settings = settings_for(peers, value_size=128)
        workload = workload_of(
            type="kubernetes",
            requests=2000,
            rate=500,
            objects=50,
            object_size=128,
            clients=8,
            connections=2,
            get_proportion=0.2,
            list_proportion=0.0,
            create_proportion=0.05,
            update_proportion=0.2,
            delete_proportion=0.05,
            event_proportion=0.5,
            event_ttl=1,
            lease_reuse_s=1,
            lease_max_objects=100,
            compaction_interval=0,
        )
        load_keys("etcd", settings, workload, QUIET)
        result = run_load("etcd", settings, workload, DatabaseLayout(tmp_path / "out"), QUIET)
        events = OPERATIONS.index("event")
        created = int(((result.records.ops == events) & (result.records.code == 0)).sum())
        # (a write whose object another client deleted first is a conflict)
        assert set(result.records.counts()) <= {"ok", "conflict"}, result.records.counts()
        assert 900 < created < 1100
        leases = result.counters["event_leases"]
        # one lease per 100 events at most, and one a second at least
        assert created / 100 <= leases <= created, (created, leases)
        # leases of 1 + 1 s: those granted in the load's first ~2 s expire
        # within its 4 s, each taking its events with it
        expired = result.counters["expirations"]
        assert 0 < expired <= created, (expired, created)
        assert sum(n for _, n in result.expirations) == expired
        assert max(n for _, n in result.expirations) <= expired
        events_prefix = b"/registry/events/"
        poll_until(
            lambda: KINDS["etcd"].count_keys(settings, events_prefix) == 0,
            20,
            interval_s=0.25,
            message="events left after their leases' TTL",
        )
        assert KINDS["etcd"].count_keys(settings, workload.key_prefix) >= 25
