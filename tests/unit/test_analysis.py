"""Figures from raw data: exact percentiles, throughput buckets, the table's format."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from dbtester.analyze.figures import PERCENTILES, ROWS, Figures, compute
from dbtester.report.table import format_value, human_bytes, render_table
from tests.support.data import START, analysis_data


def test_percentiles_are_exact() -> None:
    data = analysis_data()
    figures = compute(data)
    assert data.records is not None
    answered = data.records.code == 0
    raw_ms = data.records.latency_ns[answered] / 1e6
    for p in PERCENTILES:
        assert figures.values[f"Latency p{p:g}"] == np.percentile(raw_ms, p)
    assert figures.values["FASTEST-LATENCY"] == raw_ms.min() >= 1.0  # errors left out
    assert figures.values["TOTAL-REQUEST-NUMBER"] == 100_000
    assert figures.values["CLIENT-ERROR-COUNT"] == 10


def test_throughput_and_server_rows() -> None:
    figures = compute(analysis_data())
    v = figures.values
    assert 9_000 < float(v["AVG-THROUGHPUT"]) < 10_500  # type: ignore[arg-type]
    assert float(v["MIN-THROUGHPUT"]) <= float(v["AVG-THROUGHPUT"]) <= float(v["MAX-THROUGHPUT"])  # type: ignore[arg-type]
    assert v["SERVER-MAX-CPU-USAGE"] == 30.0
    assert v["SERVER-MAX-MEMORY-USAGE"] == 300_000_000
    assert v["SERVER-AVG-DISK-SPACE-USAGE"] == 2e9
    # three separate machines: the network rows add them up; disk rows average them
    assert v["SERVER-TOTAL-NETWORK-RX-DATA-SUM"] == 3 * 1000 * 12
    # ... and each machine's own interface gets a row of its own
    assert [v[f"SERVER-{i}-NETWORK-RX-DATA-SUM"] for i in (1, 2, 3)] == [1000 * 12] * 3
    assert "SERVER-4-NETWORK-RX-DATA-SUM" not in v
    assert v["SERVER-AVG-WRITES-COMPLETED-DELTA-SUM"] == 2 * 12
    assert v["KEYS-VERIFIED"] == "99,990 / 99,990 OK"
    assert v["CLIENT-CPU-SECONDS-PER-10K-REQUESTS"] == 0.5
    assert {"AVG-CPU", "MAX-CPU", "AVG-VMRSS-MB-BY-KEY", "AVG-LATENCY-MS-BY-KEY"} <= set(
        figures.series
    )


def test_per_server_rows_keep_member_numbers_when_one_has_no_samples() -> None:
    data = analysis_data()
    data = replace(data, servers=[data.servers[0], data.servers[2]])  # member 1's CSV was empty
    data.servers[1]["receive_bytes"] = 7
    v = compute(data).values
    assert v["SERVER-1-NETWORK-RX-DATA-SUM"] == 1000 * 12
    assert "SERVER-2-NETWORK-RX-DATA-SUM" not in v
    assert v["SERVER-3-NETWORK-RX-DATA-SUM"] == 7 * 12


def test_one_machine_counts_shared_counters_once() -> None:
    data = analysis_data()
    data = replace(data, record=data.record.model_copy(update={"embedded": True}))
    v = compute(data).values
    assert v["SERVER-TOTAL-NETWORK-RX-DATA-SUM"] == 1000 * 12
    assert not [row for row in v if row.startswith("SERVER-1-")]  # one interface, no split


def test_formats_follow_the_reference_tables() -> None:
    assert format_value("TOTAL-SECONDS", 28.31914) == "28.3191 sec"
    assert format_value("TOTAL-REQUEST-NUMBER", 1_000_000) == "1,000,000"
    assert format_value("MAX-THROUGHPUT", 37372.2) == "37,372 req/sec"
    assert format_value("AVG-LATENCY", 28.20843) == "28.2084 ms"
    assert format_value("Latency p99.9", 115.5522874) == "115.552287 ms"
    assert format_value("SERVER-MAX-CPU-USAGE", 491.83) == "491.83 %"
    assert format_value("CLIENT-MAX-MEMORY-USAGE", 97e6) == "97 MB"
    assert format_value("SERVER-AVG-DISK-SPACE-USAGE", 2.7e9) == "2.7 GB"
    assert format_value("SERVER-AVG-WRITES-COMPLETED-DELTA-SUM", 104308) == "104,308"
    assert format_value("SERVER-MAX-CPU-USAGE", None) == "-"
    assert format_value("COMPACTION-SECONDS-MAX", 0.0523) == "0.05 s"
    assert format_value("COMPACTION-P99-DURING-MS", 3478.3) == "3478.30 ms"
    assert format_value("FAULT-2-RECOVERY-SECONDS", 1.5) == "1.50 s"
    assert human_bytes(252e6) == "252 MB"


def test_table_layout() -> None:
    table = render_table(["etcd v3.5", "etcd v3.6"], [compute(analysis_data()), Figures()])
    lines = table.splitlines()
    assert lines[0].startswith("+---") and lines[0] == lines[2] == lines[-1]
    assert lines[1].rstrip("|").endswith("etcd v3.6 ")
    names = [line.split("|")[1].strip() for line in lines[3:-1]]
    per_server = [f"SERVER-{i}-NETWORK-{w}-DATA-SUM" for i in (1, 2, 3) for w in ("RX", "TX")]
    at = ROWS.index("SERVER-TOTAL-NETWORK-TX-DATA-SUM") + 1
    assert names == [*ROWS[:at], *per_server, *ROWS[at:]]
    assert all(len(line) == len(lines[0]) for line in lines)


def test_a_kind_that_cannot_multiplex_says_how_clients_shared_connections() -> None:
    from dataclasses import replace

    from dbtester.databases import get_kind

    consul, etcd = get_kind("consul"), get_kind("etcd")
    note = consul.load_note(100, 10)
    assert note is not None and "100 clients took turns on 10 connections" in note
    assert consul.load_note(10, 10) is None and etcd.load_note(100, 10) is None
    data = analysis_data(1000, 1.0)
    data = replace(data, record=data.record.model_copy(update={"notes": (note,)}))
    assert f"db: {note}" in compute(data).notes


def test_every_row_lands_in_exactly_one_group() -> None:
    from dbtester.analyze.figures import (
        CONFLICT_ROW,
        CV_ROW,
        HOST_ROWS,
        ROW_GROUPS,
        ROWS,
        grouped_rows,
        operation_row,
        row_group,
        step_row,
    )

    rows = [
        *ROWS,
        CV_ROW,
        CONFLICT_ROW,
        *HOST_ROWS,
        "SERVER-2-NETWORK-RX-DATA-SUM",
        "FAULT-1-UNAVAILABLE-SECONDS",
        operation_row("read", "THROUGHPUT"),
        operation_row("update", "Latency p99"),
        step_row(10, "AVG-THROUGHPUT"),
        step_row(10, "SERVER-MAX-CPU-USAGE"),
    ]
    grouped = grouped_rows(rows)
    assert sorted(r for _, members in grouped for r in members) == sorted(rows)  # none lost
    assert [g for g, _ in grouped] == [g for g in ROW_GROUPS if g in {row_group(r) for r in rows}]
    where = {row: row_group(row) for row in rows}
    assert where["AVG-THROUGHPUT"] == where["THROUGHPUT-CV"] == where["READ-THROUGHPUT"]
    assert where["Latency p99"] == where["AVG-LATENCY"] == where["UPDATE-Latency p99"] == "Latency"
    assert where["SERVER-AVG-SECTORS-WRITTEN-DELTA-SUM"] == "Disk"
    assert where["SERVER-MAX-MEMORY-USAGE"] == where["SERVER-2-NETWORK-RX-DATA-SUM"] == "Server"
    assert where["CLIENT-CPU-SECONDS-PER-10K-REQUESTS"] == "Client"
    assert where["KEYS-VERIFIED"] == where[CONFLICT_ROW] == "Checks"
    assert where["CLIENTS-10-SERVER-MAX-CPU-USAGE"] == "By clients"
    assert where["FAULT-1-UNAVAILABLE-SECONDS"] == "Faults"


def _client_samples(cpu: float, rss: int, receive: int) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "unix_ms": [int((START + s) * 1000) for s in range(12)],
            "cpu_percent": [cpu] * 12,
            "rss_bytes": [rss] * 12,
            "receive_bytes": [receive] * 12,
            "transmit_bytes": [2 * receive] * 12,
            "requests_done": list(range(12)),
            "errors": [0] * 12,
        }
    )
    frame["t"] = frame["unix_ms"] / 1000 - START
    return frame


def test_load_hosts_add_up_their_traffic_and_show_the_busiest() -> None:
    data = replace(
        analysis_data(),
        load_hosts=(_client_samples(80.0, 10_000, 100), _client_samples(95.0, 7_000, 300)),
    )
    v = compute(data).values
    assert v["CLIENT-TOTAL-NETWORK-RX-SUM"] == (100 + 300) * 12
    assert v["CLIENT-TOTAL-NETWORK-TX-SUM"] == 2 * (100 + 300) * 12
    assert v["CLIENT-MAX-CPU-USAGE"] == 95.0
    assert v["CLIENT-MAX-MEMORY-USAGE"] == 10_000


def test_a_companion_server_gets_rows_of_its_own_beside_the_members() -> None:
    data = analysis_data()
    server = data.servers[0].copy()
    server["cpu_percent"] = [5.0] * 11 + [95.0]  # its busiest second is the load's last
    server["rss_bytes"] = 40_000_000
    v = compute(replace(data, companions=(("postgres", server),))).values
    assert v["SERVER-POSTGRES-MAX-CPU-USAGE"] == 95.0
    assert v["SERVER-POSTGRES-MAX-MEMORY-USAGE"] == 40_000_000
    # the members' own rows leave it out
    assert v["SERVER-MAX-CPU-USAGE"] == 30.0
    names = [
        line.split("|")[1].strip()
        for line in render_table(["kine"], [Figures(v)]).splitlines()[3:-1]
    ]
    at = names.index("SERVER-MAX-MEMORY-USAGE")
    assert names[at + 1 : at + 3] == [
        "SERVER-POSTGRES-MAX-CPU-USAGE",
        "SERVER-POSTGRES-MAX-MEMORY-USAGE",
    ]
    assert format_value("SERVER-POSTGRES-MAX-MEMORY-USAGE", 40e6) == "40 MB"


def test_the_database_size_where_the_members_said_it() -> None:
    data = analysis_data()
    for member, frame in enumerate(data.servers):
        frame["db_bytes"] = [-1] + [(member + 1) * 1_000_000 + s for s in range(1, 12)]
        frame["db_in_use_bytes"] = [-1] * 12 if member else [500_000] * 12
    figures = compute(data)
    v = figures.values
    assert v["SERVER-MAX-DB-SIZE"] == 3_000_011
    assert v["SERVER-MAX-DB-SIZE-IN-USE"] == 500_000  # the -1s (not said) are no sizes
    size = figures.series["AVG-DB-SIZE-MB"]
    assert size.y[-1] == pytest.approx(2.000011)  # the three members' mean, in MB
    assert figures.series["AVG-DB-SIZE-IN-USE-MB"].y.max() == pytest.approx(0.5)
    names = [
        line.split("|")[1].strip() for line in render_table(["etcd"], [figures]).splitlines()[3:-1]
    ]
    at = names.index("SERVER-MAX-MEMORY-USAGE")
    assert names[at + 1 : at + 3] == ["SERVER-MAX-DB-SIZE", "SERVER-MAX-DB-SIZE-IN-USE"]
    assert format_value("SERVER-MAX-DB-SIZE", 3_000_011) == "3.0 MB"
    assert "SERVER-MAX-DB-SIZE" not in compute(analysis_data()).values  # a kind that says none
