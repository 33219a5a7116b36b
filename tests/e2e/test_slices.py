"""`interleave: slices` on real clusters: two etcd members up at once, the
load alternating between them a slice at a time, each slice a trial of its
database; and `repeat: auto` deciding an A/B with a known difference from
the slices' pairs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from dbtester.results import ResultsDir
from tests.support.cases import database, make_case
from tests.support.cluster import dbtester

pytestmark = pytest.mark.integration

VERSION = "3.5.17"
ROUNDS = 3
#: a closed loop's slice ends at the first poll (0.25 s) after its length,
#: then its requests in flight finish (milliseconds here); the slices'
#: lengths are asserted within [SLICE_S - 0.1, SLICE_S + 0.75] s
SLICE_S = 1.0


def _run(home: Path, root: Path, case: dict[str, Any]) -> Path:
    config = root / "case.yaml"
    config.write_text(yaml.safe_dump(case))
    out = root / "results"
    result = dbtester(home, "run", "--no-charts", str(config), "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _windows(out: Path, db: str) -> list[tuple[float, float]]:
    """Each slice's first request's due time and last request's reply."""
    windows = []
    for k in range(1, ROUNDS + 1):
        records = ResultsDir(out).read_requests(db, k)
        assert records is not None
        windows.append(
            (records.due_ns.min() / 1e9, (records.due_ns + records.latency_ns).max() / 1e9)
        )
    return windows


@pytest.fixture(scope="module")
def home(installed_home) -> Path:
    return Path(installed_home("etcd", VERSION))


def test_slices_alternate_keep_their_schedule_and_every_write_once(
    home: Path, tmp_path: Path
) -> None:
    """ "open" loads open loop, "closed" closed loop, in slices of one run."""
    rate = 400
    case = make_case(
        title="slices",
        workload={"requests": 1_000_000, "clients": 8, "connections": 2},
        databases=[
            database("open", version=VERSION, workload={"rate": rate}),
            database("closed", version=VERSION),
        ],
        interleave="slices",
        slice_s=SLICE_S,
        repeat=ROUNDS,
    )
    out = _run(home, tmp_path, case)
    spans = {db: _windows(out, db) for db in ("open", "closed")}
    every = sorted((w, db) for db in spans for w in spans[db])
    # one database loaded at a time: no slice overlaps the next
    assert all(one[0][1] <= two[0][0] for one, two in itertools.pairwise(every))
    # round k holds both databases' slice k, before round k + 1 begins
    for k in range(ROUNDS - 1):
        assert max(spans["open"][k][1], spans["closed"][k][1]) <= min(
            spans["open"][k + 1][0], spans["closed"][k + 1][0]
        )
    # a closed loop's slice ends on time
    for start, end in spans["closed"]:
        assert SLICE_S - 0.1 <= end - start <= SLICE_S + 0.75, end - start
    for k in range(1, ROUNDS + 1):
        records = ResultsDir(out).read_requests("open", k)
        assert records is not None
        # rate x slice_s requests, each due on the schedule from the slice's
        # start: no backlog from the slices it sat out
        assert len(records) == rate * SLICE_S
        due = np.sort(records.due_ns)
        assert np.allclose(np.diff(due), 1e9 / rate, atol=1e3)  # 1 µs: the schedule's own
    for db in ("open", "closed"):
        _every_write_once(out, db)
    summary = json.loads((out / "result.json").read_text())
    assert all(len(db["trial_figures"]) == ROUNDS for db in summary["databases"])
    _compared_round_by_round(out, summary)


def _compared_round_by_round(out: Path, summary: dict[str, Any]) -> None:
    """The run's comparison pairs round k's slices: a paired t-test."""
    from scipy import stats

    compared = summary["comparisons"]
    assert compared and all(c["paired"] for c in compared)
    (throughput,) = [c for c in compared if c["row"] == "AVG-THROUGHPUT"]
    open_, closed = (
        [t["AVG-THROUGHPUT"] for t in db["trial_figures"]] for db in summary["databases"]
    )
    assert throughput["p_value"] == pytest.approx(stats.ttest_rel(closed, open_).pvalue, rel=1e-9)
    assert "paired t-test over the rounds" in (out / "comparison.txt").read_text()


def _every_write_once(out: Path, db: str) -> None:
    """Each slice is a trial of its own, every write of every slice found."""
    total = 0
    for k in range(1, ROUNDS + 1):
        record = json.loads((out / db / f"trial-{k}" / "run.json").read_text())
        assert record["trial"] == k and not record["error"]
        assert record["slice_s"] == SLICE_S
        # the members' samples, fetched once, are each slice's too
        assert (out / db / f"trial-{k}" / "server-0-metrics.csv").exists()
        requests = ResultsDir(out).read_requests(db, k)
        assert requests is not None and requests.errors() == 0
        total += len(requests)
    # every slice's writes went to keys of their own, all found on the one
    # cluster: counted once, on the last slice's record
    last = json.loads((out / db / f"trial-{ROUNDS}" / "run.json").read_text())
    assert last["verification"]["attempted"] == last["verification"]["found"] == total


def test_repeat_auto_finds_the_capped_database_slower(home: Path, tmp_path: Path) -> None:
    case = make_case(
        title="slices A/B",
        workload={"requests": 1_000_000, "clients": 16, "connections": 4},
        databases=[
            database("a", version=VERSION),
            # one client in flight against sixteen: far slower, whatever the host does
            database("capped", version=VERSION, workload={"clients": 1, "connections": 1}),
        ],
        interleave="slices",
        slice_s=SLICE_S,
        repeat="auto",
        max_trials=10,
        stopping_metrics=["AVG-THROUGHPUT"],
    )
    out = _run(home, tmp_path, case)
    summary = json.loads((out / "result.json").read_text())
    (look,) = summary["sequential"]["looks"]
    assert look["database"] == "capped" and look["verdict"] == "slower", look
    assert summary["sequential"]["stopped"] == "decided"
