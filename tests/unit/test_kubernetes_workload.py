"""`type: kubernetes` as pure logic: its plan parts, its keys written back,
its objects accounted for, and its counters turned into table rows."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dbtester.analyze import DatabaseAnalysis, compare_databases
from dbtester.analyze.compactions import compaction_values, overlapping
from dbtester.analyze.data import DatabaseData
from dbtester.analyze.expirations import expiration_values
from dbtester.analyze.figures import Figures, compute, table_rows
from dbtester.analyze.informers import informer_values
from dbtester.compare import check_metrics
from dbtester.databases.base import LoadSettings
from dbtester.load import native
from dbtester.results import (
    OPERATIONS,
    CompactionRecord,
    DatabaseRecord,
    InformerLags,
    InformerRecord,
    LoadWindow,
    Records,
)
from dbtester.workloads import Workload, workload_of
from dbtester.workloads.kubernetes import COMPARED_ROWS, account_objects

START = 1_800_000_000.0


def _workload(**keys: object) -> Workload:
    return workload_of(type="kubernetes", requests=100, clients=4, connections=2, **keys)


def test_the_plan_names_objects_and_shares_and_a_phase_each_run() -> None:
    w = _workload(objects=300, object_size=700, page_size=50)
    settings = LoadSettings(
        endpoints=("127.0.0.1:2379",),
        client={},
        key_size=w.key_size,
        value_size=w.value_size,
        consistency="linearizable",
        timeout_s=5.0,
    )
    plan = native.plan("etcd", settings, w)
    objects = plan["objects"]
    assert objects is not None
    assert (objects["phase"], objects["count"], objects["page_size"]) == ("run", 300, 50)
    assert objects["prefix"] == "/registry/pods/"
    mix = objects["mix"]
    assert mix["get"] + mix["list"] + mix["create"] + mix["update"] + mix[
        "delete"
    ] == pytest.approx(1)
    assert plan["value_size"] == 700  # its values are its objects
    loaded = native.load_phase("etcd", settings, w)
    assert loaded["objects"] is not None
    assert (loaded["objects"]["phase"], loaded["objects"]["first"]) == ("load", 0)
    assert loaded["steps"][0]["requests"] == 300
    read = native.single_operation("etcd", settings, w, "read", key=299)
    assert read["objects"] is not None
    assert (read["objects"]["phase"], read["objects"]["first"]) == ("read", 299)


def test_its_keys_write_back_to_the_same_workload() -> None:
    w = _workload(object_size=700)
    raw = w.as_raw()
    assert "value_size" not in raw and "key_size" not in raw
    assert workload_of(**raw) == w


@pytest.mark.parametrize(
    ("found", "lost", "unexpected"), [(95, 0, 0), (98, 0, 0), (94, 1, 0), (99, 0, 1)]
)
def test_objects_found_are_held_to_the_tables_bounds(
    found: int, lost: int, unexpected: int
) -> None:
    """95 objects known to exist, 3 more whose last write's outcome is unknown."""
    counters = {"objects_low": 95, "objects_high": 98}
    v = account_objects({"ok": 500, "conflict": 7, "timeout": 3}, found, counters)
    assert (v.attempted, v.acknowledged, v.unknown) == (510, 507, 3)
    assert (v.expected_min, v.expected_max) == (95, 98)
    assert (v.lost, v.unexpected, v.ok) == (lost, unexpected, lost == unexpected == 0)


def test_a_lost_object_and_an_unexpected_one_do_not_cancel_out() -> None:
    """The count is within bounds, but the engine's list after the load
    found one object known to exist missing and one known to be gone."""
    counters = {"objects_low": 95, "objects_high": 98, "objects_lost": 1, "objects_unexpected": 1}
    v = account_objects({"ok": 500, "conflict": 7, "timeout": 3}, 96, counters)
    assert (v.lost, v.unexpected, v.ok) == (1, 1, False)
    clean = {**counters, "objects_lost": 0, "objects_unexpected": 0}
    assert account_objects({"ok": 500}, 96, clean).ok


def test_the_counters_are_rows_and_list_rates_are_per_second_of_load() -> None:
    """100 requests over 10 s, 20 of them lists that read 5 MB in 400 pages."""
    n = 100
    verbs = ["get", "list", "create", "update", "delete"]
    ops = np.array([OPERATIONS.index(verbs[i % 5]) for i in range(n)], np.uint8)
    due = (START * 1e9 + np.arange(n) * 1e8).astype(np.int64)
    latency = np.full(n, 1_000_000, np.int64)
    records = Records(
        due, latency, latency, np.zeros(n, np.uint8), np.zeros(n, np.uint16), ["ok"], ops
    )
    counters = {
        "update_conflicts": 7,
        "update_retries": 6,
        "delete_conflicts": 2,
        "delete_retries": 1,
        "create_skipped": 0,
        "delete_skipped": 3,
        "list_pages": 400,
        "list_objects": 20_000,
        "list_bytes": 5_000_000,
    }
    record = DatabaseRecord(
        run_id="run",
        database={
            "id": "etcd",
            "kind": "etcd",
            "version": "3.5.17",
            "workload": {"type": "kubernetes"},
        },
        started_unix=START,
        load=LoadWindow(
            started_unix=START, ended_unix=START + 10, workers=1, cpu_seconds=1.0, counters=counters
        ),
    )
    figures = compute(DatabaseData("etcd", "etcd", record, records, None, []))
    v = figures.values
    assert (v["UPDATE-CONFLICTS"], v["UPDATE-RETRIES"], v["DELETE-SKIPPED"]) == (7, 6, 3)
    assert v["LIST-PAGES"] == 400
    span = records.span_s(START)
    assert v["LIST-OBJECTS-PER-S"] == pytest.approx(20_000 / span)
    assert v["LIST-MB-PER-S"] == pytest.approx(5 / span)
    for verb in verbs:
        assert v[f"{verb.upper()}-THROUGHPUT"] == pytest.approx(20 / span)
    rows = table_rows([figures])
    assert (
        rows.index("DELETE-Latency p99.9")
        < rows.index("UPDATE-CONFLICTS")
        < rows.index("LIST-MB-PER-S")
    )
    # no compaction: no compaction rows; no events: no event rows
    assert not any(row.startswith("COMPACTION-") for row in v)
    assert not any(row.startswith(("EVENT-", "EXPIRATIONS-")) for row in v)
    # with events: their leases, expirations and the busiest second
    assert record.load is not None
    evented = record.model_copy(
        update={
            "load": record.load.model_copy(
                update={
                    "counters": {**counters, "event_leases": 4, "expirations": 900},
                    "expirations": ((START + 2, 100), (START + 3, 700), (START + 5, 100)),
                }
            )
        }
    )
    v = compute(DatabaseData("etcd", "etcd", evented, records, None, [])).values
    assert (v["EVENT-LEASES"], v["EVENT-EXPIRATIONS"], v["EXPIRATIONS-PER-S-MAX"]) == (4, 900, 700)
    rows = table_rows([compute(DatabaseData("etcd", "etcd", evented, records, None, []))])
    assert rows.index("EVENT-LEASES") < rows.index("EXPIRATIONS-PER-S-MAX")


def test_events_are_leased_as_the_apiserver_leases_them() -> None:
    w = _workload(event_proportion=0.2, update_proportion=0.4, event_ttl="1h", lease_reuse_s=30)
    plan = w.plan_kubernetes()
    assert plan is not None and plan["mix"]["event"] == 0.2
    assert (plan["events_prefix"], plan["event_ttl_s"]) == ("/registry/events/", 3600)
    assert (plan["lease_reuse_s"], plan["lease_max_objects"]) == (30, 1000)
    assert "events live 3600 s, a lease per 30 s or 1,000 events" in w.describe("100")
    assert "events" not in _workload().describe("100")
    with pytest.raises(ValueError, match=r"whole seconds: event_ttl 1\.5 s"):
        _workload(event_proportion=0.2, update_proportion=0.4, event_ttl="1500ms")
    with pytest.raises(ValueError, match="event_proportion must add up to 1"):
        _workload(event_proportion=0.2)


def test_requests_overlapping_a_compaction_are_during_it() -> None:
    compactions = [
        CompactionRecord(started_unix=10.0, ended_unix=11.0, revision=5),
        CompactionRecord(started_unix=20.0, ended_unix=20.5, revision=9),
    ]
    # spans: before both, straddling the first's start, inside it, straddling
    # its end, between, at the second's end exactly, after both
    begin = np.array([1.0, 9.5, 10.2, 10.9, 12.0, 20.5, 21.0])
    end = np.array([2.0, 10.1, 10.3, 11.5, 19.0, 20.6, 22.0])
    windows = [(c.started_unix, c.ended_unix) for c in compactions]
    assert overlapping(windows, begin, end).tolist() == [
        False,
        True,
        True,
        True,
        False,
        True,
        False,
    ]
    # in any order, and with none
    assert overlapping(windows[::-1], begin, end).tolist()[1:4] == [True, True, True]
    assert not overlapping([], begin, end).any()


def test_latency_during_compactions_against_outside_them() -> None:
    """100 requests 0.1 s apart from t=0, 1 ms each but the 10 sent during a
    compaction from 5.0 to 6.0 s, which take 50 ms; one failure there is
    not counted."""
    n = 100
    due = (np.arange(n) * 1e8).astype(np.int64)
    latency = np.full(n, 1_000_000, np.int64)
    inside = (due >= 5e9) & (due < 6e9)
    latency[inside] = 50_000_000
    code = np.zeros(n, np.uint8)
    code[55] = 1
    latency[55] = 900_000_000
    records = Records(due, latency, latency, code, np.zeros(n, np.uint16), ["ok", "timeout"])
    compactions = [CompactionRecord(started_unix=5.0, ended_unix=6.0, revision=3)]
    values = compaction_values(compactions, records)
    assert values["COMPACTION-SECONDS-MAX"] == pytest.approx(1.0)
    assert values["COMPACTION-MAX-DURING-MS"] == pytest.approx(50.0)
    assert values["COMPACTION-P99-DURING-MS"] == pytest.approx(50.0)
    # the request sent at 4.9 s ends at 4.901 s: outside; every outside one is 1 ms
    assert values["COMPACTION-MAX-OUTSIDE-MS"] == pytest.approx(1.0)
    assert values["COMPACTION-P99-OUTSIDE-MS"] == pytest.approx(1.0)
    assert compaction_values([], records) == {}


def test_informer_rows_sum_their_work_and_judge_each() -> None:
    def informer(synced_s: float, events: int, **more: object) -> InformerRecord:
        base: dict[str, object] = {"relists": 0, "resumes": 0, "converged": True}
        return InformerRecord.model_validate({"synced_s": synced_s, "events": events} | base | more)

    lags = InformerLags.of([[1000, 3000], [2000, 100_000]])
    good = [informer(0.2, 10), informer(0.5, 12, relists=1, resumes=2)]
    values = informer_values(good, lags)
    assert values["INFORMER-SYNCED-MS"] == pytest.approx(500.0)  # the slowest
    assert (values["INFORMER-EVENTS"], values["INFORMER-RELISTS"]) == (22, 1)
    assert values["INFORMER-RESUMES"] == 2
    assert values["INFORMER-LAG-P50-MS"] == pytest.approx(2.5)
    assert values["INFORMER-LAG-MAX-MS"] == pytest.approx(100.0)
    assert values["INFORMERS-CONVERGED"] == "2 / 2 OK"
    # one that found something wrong, one that never caught up
    wrong = informer(0.1, 3, problems=("/a at revision 7 arrived twice",), problem_count=1)
    behind = informer(0.1, 3, converged=False)
    assert informer_values([*good, wrong, behind], None)["INFORMERS-CONVERGED"] == "2 / 4 FAILED"
    assert "INFORMER-LAG-P99-MS" not in informer_values(good, InformerLags.of([[]]))
    assert informer_values([], lags) == {}


def test_windows_that_overlap_each_other_still_place_every_span() -> None:
    # a long window holding a short one, and one that begins inside it:
    # a span after the short one's end but inside the long one is inside
    windows = [(10.0, 20.0), (11.0, 12.0), (19.0, 25.0)]
    begin = np.array([5.0, 13.0, 21.0, 26.0])
    end = np.array([6.0, 14.0, 22.0, 27.0])
    assert overlapping(windows, begin, end).tolist() == [False, True, True, False]


def test_latency_in_seconds_with_expirations_against_the_rest() -> None:
    """100 requests 0.1 s apart from t=0, 1 ms each but those sent in the
    second from 3.0 s, in which 400 events expired, which take 20 ms; a
    second that counted none is no window."""
    n = 100
    due = (np.arange(n) * 1e8).astype(np.int64)
    latency = np.full(n, 1_000_000, np.int64)
    latency[(due >= 3e9) & (due < 4e9)] = 20_000_000
    records = Records(due, latency, latency, np.zeros(n, np.uint8), np.zeros(n, np.uint16), ["ok"])
    values = expiration_values([(3.0, 400), (7.0, 0)], records)
    assert values["EXPIRATIONS-P99-DURING-MS"] == pytest.approx(20.0)
    # the request sent at 2.9 s ends at 2.901 s: outside, as are all others
    assert values["EXPIRATIONS-P99-OUTSIDE-MS"] == pytest.approx(1.0)
    assert expiration_values([], records) == {}


def test_compactions_expirations_and_informer_lag_are_drawn_per_database(tmp_path: Path) -> None:
    from bokeh.models.annotations import BoxAnnotation

    from dbtester.analyze.figures import EXPIRATION_SERIES, INFORMER_BY_INFORMER, Window
    from dbtester.report.charts import CHARTS, render_charts
    from dbtester.report.interactive import _plot

    n = 100
    due = (START * 1e9 + np.arange(n) * 1e8).astype(np.int64)
    latency = np.full(n, 1_000_000, np.int64)
    ops = np.full(n, OPERATIONS.index("update"), np.uint8)
    records = Records(
        due, latency, latency, np.zeros(n, np.uint8), np.zeros(n, np.uint16), ["ok"], ops
    )
    load = LoadWindow(
        started_unix=START,
        ended_unix=START + 10,
        workers=1,
        cpu_seconds=1.0,
        counters={"update_conflicts": 0, "event_leases": 1, "expirations": 30},
        compactions=(CompactionRecord(started_unix=START + 2, ended_unix=START + 2.5, revision=9),),
        expirations=((START + 4, 10), (START + 5, 20)),
        informers=tuple(
            InformerRecord(synced_s=0.1, relists=0, resumes=0, events=3, converged=True)
            for _ in range(3)
        ),
    )
    record = DatabaseRecord(
        run_id="run",
        database={"id": "etcd", "kind": "etcd", "version": "3.6.8", "workload": {}},
        started_unix=START,
        load=load,
    )
    lags = InformerLags.of([[1_000, 2_000, 100_000], [], [5_000]])  # µs; the second saw none
    data = DatabaseData("etcd", "etcd", record, records, None, [], informer_lags=lags)
    figures = compute(data)
    start = data.load_start
    assert figures.windows == [Window(START + 2 - start, START + 2.5 - start)]
    expired = figures.series[EXPIRATION_SERIES]
    assert list(expired.x) == [START + 4 - start, START + 5 - start]
    assert list(expired.y) == [10, 20]
    by_informer = figures.series[INFORMER_BY_INFORMER]
    assert list(by_informer.x) == [0.0, 2.0]  # the informer without a lag has no point
    assert by_informer.y[0] == pytest.approx(np.percentile([1, 2, 100], 99))
    # drawn on the charts over time in the database's colour, named once
    render_charts(lambda name: tmp_path / f"{name}.svg", ["etcd"], [figures])
    assert "etcd: compactions" in (tmp_path / "AVG-THROUGHPUT.svg").read_text()
    assert "compactions" not in (tmp_path / "AVG-LATENCY-MS-BY-KEY.svg").read_text()
    assert "compactions" in (tmp_path / "LATENCY-HEATMAP.svg").read_text()
    (chart,) = [c for c in CHARTS if c.name == "AVG-THROUGHPUT"]
    boxes = [b for b in _plot(chart, ["etcd"], [figures]).center if isinstance(b, BoxAnnotation)]
    (window,) = figures.windows
    assert [(b.left, b.right) for b in boxes] == [(window.start_s, window.end_s)]


def _column(db: str, rows: dict[str, float]) -> DatabaseAnalysis:
    """A database of three trials whose rows are ``rows`` plus 0, 1 and 2 %."""
    unsliced = SimpleNamespace(slice_s=None)
    trials = tuple(SimpleNamespace(trial=k, record=unsliced) for k in (1, 2, 3))
    figures = tuple(
        Figures(values={row: value * (1 + k / 100) for row, value in rows.items()})
        for k in range(3)
    )
    return DatabaseAnalysis(db, db, trials, figures, Figures(), {})  # type: ignore[arg-type]


def test_kubernetes_rows_are_compared_without_being_named() -> None:
    """Where both ran Kubernetes traffic, its rows are compared by default
    (before the usual ones); a key-value run has none to compare."""
    traffic = {"UPDATE-Latency p99": 10.0, "UPDATE-CONFLICTS": 40.0, "AVG-THROUGHPUT": 900.0}
    slower = {row: value * 2 for row, value in traffic.items()}
    compared = compare_databases(_column("a", traffic), _column("b", slower))
    rows = [c.change.metric.row for c in compared]
    assert rows == ["UPDATE-Latency p99", "UPDATE-CONFLICTS", "AVG-THROUGHPUT"]
    assert [c.change.significant for c in compared] == [True, True, True]
    plain = compare_databases(
        _column("a", {"AVG-THROUGHPUT": 900.0}), _column("b", {"AVG-THROUGHPUT": 950.0})
    )
    assert [c.change.metric.row for c in plain] == ["AVG-THROUGHPUT"]
    assert set(COMPARED_ROWS) <= set(check_metrics(()))  # compare's and history's default
