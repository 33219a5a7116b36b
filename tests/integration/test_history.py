"""``dbtester history`` over a bucket on a real S3 server on loopback and over
a local folder: three runs derived from one real run (one etcd member, a few
thousand writes), published with ``dbtester publish``; both give the same
table, and ``--check`` fails once a slower run is added.

The S3 server is Versity's S3 gateway (versitygw, a production S3 server over
a POSIX folder, built once from the Go module proxy into the shared test
home). ``dbtester publish`` itself is tested in test_publish.py: here the runs
are published through its library, many in one process, since twenty CLI
starts cost more than the history they set up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from benchmarks.history_scale import derive_run
from dbtester.results import ResultsDir
from dbtester.util import net
from tests.conftest import ROOT
from tests.support.cases import database, make_case, write_case
from tests.support.data import derived_runs
from tests.support.s3 import MARKER, Bucket, cloud_env, serve

pytestmark = pytest.mark.integration

V1 = ROOT / "tests" / "fixtures" / "results-v1"

VERSION = "3.6.8"
DAY = 86400.0


def _makefile_versitygw() -> str:
    """The module@version the Makefile's test-tools builds: one place to
    change it, and this test finds the binary that build made."""
    makefile = ROOT / "Makefile"
    for line in makefile.read_text().splitlines():
        name, _, value = line.partition(":=")
        if name.strip() == "VERSITYGW":
            return value.strip()
    raise AssertionError("the Makefile no longer names VERSITYGW")


VERSITYGW = _makefile_versitygw()


def _versitygw(shared_home: Path) -> Path:
    """versitygw: `make test-tools` builds it before pytest; a run of this file
    alone builds it here the first time (about 3 minutes)."""
    bin_dir = shared_home / "tools" / f"versitygw-{VERSITYGW.rpartition('@')[2]}"
    binary = bin_dir / "versitygw"
    if not binary.exists():
        env = {**os.environ, "GOBIN": str(bin_dir), "GOFLAGS": "-mod=mod"}
        built = subprocess.run(
            ["go", "install", VERSITYGW], capture_output=True, text=True, env=env, check=False
        )
        assert built.returncode == 0, built.stderr[-3000:]
    return binary


@pytest.fixture(scope="module")
def versity_bucket(shared_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bucket]:
    binary = _versitygw(shared_home)
    root = tmp_path_factory.mktemp("versitygw")
    (root / "data" / "results").mkdir(parents=True)  # a folder below the root is a bucket
    port = net.free_port()
    argv = [str(binary), "--access", "testing", "--secret", MARKER]
    argv += ["--port", f"127.0.0.1:{port}", "posix", str(root / "data")]
    with serve(argv, port, root / "versitygw.log"):
        endpoint = f"http://127.0.0.1:{port}"

        def objects(prefix: str) -> dict[str, bytes]:
            # the posix backend keeps each object as the file at its key
            base = root / "data" / "results" / prefix
            return {
                p.relative_to(base).as_posix(): p.read_bytes()
                for p in base.rglob("*")
                if p.is_file()
            }

        yield Bucket("s3", "results", endpoint, {"AWS_ENDPOINT_URL": endpoint}, objects)


def _dbtester(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "dbtester", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


@pytest.fixture(scope="module")
def real_run(installed_home, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = installed_home("etcd", VERSION)
    root = tmp_path_factory.mktemp("real")
    # the load's key and value sizes are the product's defaults
    load = {"requests": 2000, "clients": 8, "connections": 2, "key_size": None, "value_size": None}
    case = make_case(title="history", workload=load, databases=[database("etcd", version=VERSION)])
    write_case(root / "case.yaml", case)
    out = root / "results"
    env = {**cloud_env({}, root), "DBTESTER_HOME": home}
    result = _dbtester(env, "run", "--no-charts", str(root / "case.yaml"), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert list((out / "parquet" / "figures").glob("database=etcd/date=*/*.parquet"))
    return out


def _derive(real: Path, target: Path, k: int, factor: float) -> Path:
    store = ResultsDir(real)
    summary = store.read_summary()
    assert summary is not None
    run = target / f"run-{k}"
    derive_run(
        store.load(),
        summary,
        run,
        run_id=f"run-{k}",
        started_unix=summary.started_unix + k * DAY,
        factor=factor,
    )
    return run


#: publishes each run (argv: URL RUN...) to URL/<its folder name>
_PUBLISH_ALL = """
import sys
from pathlib import Path
from dbtester.publish.upload import publish
url, runs = sys.argv[1], sys.argv[2:]
for run in map(Path, runs):
    publish(run, f"{url}/{run.name}", quiet=True)
"""


def _publish(env: dict[str, str], runs: list[Path], url: str) -> None:
    """``runs`` published to ``url``, each under its folder's name, in one process."""
    result = subprocess.run(
        [sys.executable, "-c", _PUBLISH_ALL, url, *map(str, runs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_history_in_the_bucket_and_locally_gives_the_same_table_and_gate(
    real_run: Path, versity_bucket: Bucket, tmp_path: Path
) -> None:
    bucket = versity_bucket
    env = cloud_env(bucket.env, tmp_path)
    local = tmp_path / "history"
    url = bucket.url("nightly")
    runs = [_derive(real_run, local, k, factor) for k, factor in enumerate([1.0, 1.01, 0.99])]
    _publish(env, runs, url)

    stored = bucket.objects("nightly")
    assert "run-2/result.json" in stored
    assert any(k.startswith("run-0/parquet/figures/database=etcd/date=") for k in stored)

    tables = {}
    for source in (url, str(local), f"file://{local}"):
        result = _dbtester(env, "history", source, "--check")
        assert result.returncode == 0, (source, result.stderr)
        tables[source] = result.stdout
    assert tables[url] == tables[str(local)] == tables[f"file://{local}"]
    assert [line.split()[0] for line in tables[url].splitlines()[2:5]] == [
        "run-0",
        "run-1",
        "run-2",
    ]

    # a synthetic slower run: 50% slower, from the same real run's records
    _publish(env, [_derive(real_run, local, 3, 1.5)], url)
    for source in (url, str(local)):
        result = _dbtester(env, "history", source, "--check")
        assert result.returncode == 1, (source, result.stdout, result.stderr)
        assert "etcd Latency p99" in result.stderr and "run-3" in result.stderr


def test_changes_in_the_bucket_are_named_at_the_run_they_start(
    versity_bucket: Bucket, tmp_path: Path
) -> None:
    """20 nightly runs published to the S3 server, 20% slower from run 12 on
    and run 5 a single slow night: `--changes` names run 12 (its folder in
    the bucket) and not run 5, from the bucket as from the local folder."""
    env = cloud_env(versity_bucket.env, tmp_path)
    factors = list(np.random.default_rng(11).normal(1.0, 0.01, 20))
    factors[5] *= 1.3
    factors = [f * (1.2 if k >= 12 else 1.0) for k, f in enumerate(factors)]
    local = derived_runs(V1, tmp_path / "nightly", factors, copy_files=False)
    url = versity_bucket.url("changes")
    _publish(env, [local / f"run-{k}" for k in range(len(factors))], url)
    found = {}
    for source in (url, str(local)):
        args = ("history", source, "--changes", "--metric", "AVG-THROUGHPUT", "--json")
        result = _dbtester(env, *args)
        assert result.returncode == 0, (source, result.stderr)
        found[source] = json.loads(result.stdout)["changes"]["points"]
    for source, points in found.items():
        # each of the fixture's two databases, at run 12 only
        assert {(p["database"], p["run_id"]) for p in points} == {
            ("etcd-v3.5", "run-12"),
            ("etcd-v3.6", "run-12"),
        }, (source, points)
        assert all(-20 < p["change_pct"] < -12 and p["verdict"] == "slower" for p in points)
    # its folder: the bucket's key, the local path
    assert {p["root"] for p in found[url]} == {"results/changes/run-12"}
    assert {p["root"] for p in found[str(local)]} == {str(local / "run-12")}
