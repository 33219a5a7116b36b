"""`dbtester publish` against real servers on loopback: moto's S3 server and
gcp-storage-emulator, through the real command line. Every object is read back
with a client of its own (boto3, the GCS JSON API) and compared with the local
files, which must not change."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from dbtester.errors import PublishError
from dbtester.publish import publish, published_readme
from dbtester.report.charts import STANDARD
from dbtester.util import net
from tests.support.data import make_results, tree_hashes
from tests.support.s3 import MARKER, Bucket, below, cloud_env, get, serve, tool

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gcs_bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bucket]:
    port = net.free_port()
    log = tmp_path_factory.mktemp("gcs") / "gcs.log"
    argv = [tool("gcp-storage-emulator"), "start", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--in-memory", "--default-bucket", "results"]
    with serve(argv, port, log):
        endpoint = f"http://127.0.0.1:{port}"

        def objects(prefix: str) -> dict[str, bytes]:
            listing = get(f"{endpoint}/storage/v1/b/results/o")
            names = [item["name"] for item in json.loads(listing).get("items", [])]
            found = {
                name: get(
                    f"{endpoint}/download/storage/v1/b/results/o/{quote(name, safe='')}?alt=media"
                )
                for name in names
            }
            return below(prefix, found)

        yield Bucket("gs", "results", endpoint, {"STORAGE_EMULATOR_HOST": endpoint}, objects)


@pytest.fixture(params=["s3", "gs"])
def bucket(request: pytest.FixtureRequest) -> Bucket:
    fixture = "s3_bucket" if request.param == "s3" else "gcs_bucket"
    found: Bucket = request.getfixturevalue(fixture)
    return found


def _dbtester(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "dbtester", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert MARKER not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _no_marker_in(*trees: Path) -> None:
    for tree in trees:
        for path in tree.rglob("*"):
            assert not path.is_file() or MARKER.encode() not in path.read_bytes(), path


def _check_published(bucket: Bucket, prefix: str, root: Path, local: dict[str, str]) -> None:
    """Every local file is there under its own key, byte for byte; the README is
    the local one with its links on the bucket, and every chart link serves the chart."""
    objects = bucket.objects(prefix)
    assert sorted(objects) == sorted(local)
    base = bucket.public(prefix)
    for key, data in objects.items():
        if key != "README.md":
            assert _sha(data) == local[key], key
    readme = objects["README.md"].decode()
    assert readme == published_readme((root / "README.md").read_text(), base)
    charts = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    drawn = {p.stem for p in (root / "charts").iterdir()}
    # every chart drawn is linked: the 19 standard ones, and the host-speed
    # probe's where the run recorded it
    assert len(charts) == len(drawn) and {c.name for c in STANDARD} <= drawn
    for link in charts:
        assert link.startswith(f"{base}/charts/") and link.endswith(".svg")
        chart = root / "charts" / link.rsplit("/", 1)[1]
        assert get(link) == chart.read_bytes()
    assert all(MARKER.encode() not in data for data in objects.values())


def test_publish_and_read_back(bucket: Bucket, tmp_path: Path) -> None:
    root = make_results(tmp_path / "results")
    local = tree_hashes(root)
    env = cloud_env(bucket.env, tmp_path)
    prefix = f"round-trip/{secrets.token_hex(3)}"

    first = _dbtester(env, "publish", str(root), bucket.url(prefix))
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"{bucket.public(prefix)}/README.md\n"
    assert f"published {len(local)} files (" in first.stderr
    _check_published(bucket, prefix, root, local)
    keys = sorted(bucket.objects(prefix))

    # Publishing again overwrites the same keys: no nested folder, nothing else.
    again = _dbtester(env, "publish", str(root), bucket.url(prefix) + "/")
    assert again.returncode == 0, again.stderr
    assert sorted(bucket.objects(prefix)) == keys
    _check_published(bucket, prefix, root, local)
    assert tree_hashes(root) == local
    _no_marker_in(root)


def test_dead_endpoint_fails_fast_then_the_retry_completes(
    s3_bucket: Bucket, tmp_path: Path
) -> None:
    root = make_results(tmp_path / "results")
    local = tree_hashes(root)
    prefix = "after-a-failure"
    url = s3_bucket.url(prefix)
    dead = cloud_env({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{net.free_port()}"}, tmp_path)

    began = time.monotonic()
    failed = _dbtester(dead, "publish", str(root), url)
    seconds = time.monotonic() - began
    assert failed.returncode == 3, failed.stderr
    assert seconds < 30
    assert "failed at charts/AVG-CPU.svg (3 attempts)" in failed.stderr
    assert f"the local results in {root} are intact" in failed.stderr
    retry = f"dbtester publish {root} {url}"
    assert failed.stderr.rstrip().endswith(f"Retry with: {retry}")
    assert tree_hashes(root) == local
    assert s3_bucket.objects(prefix) == {}

    # The command it names, word for word, finishes the job once the endpoint answers.
    live = cloud_env(s3_bucket.env, tmp_path)
    words = shlex.split(retry)
    assert words[0] == "dbtester"
    done = _dbtester(live, *words[1:])
    assert done.returncode == 0, done.stderr
    _check_published(s3_bucket, prefix, root, local)
    assert tree_hashes(root) == local
    _no_marker_in(root)


def test_gcs_deadline_bounds_a_dead_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gcsfs retries refused connections by itself for ~34 s; the per-attempt
    deadline is what stops it, and the message still gives the cause."""
    root = make_results(tmp_path / "results")
    local = tree_hashes(root)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"127.0.0.1:{net.free_port()}")
    began = time.monotonic()
    with pytest.raises(PublishError) as caught:
        publish(root, "gs://results/x", quiet=True, attempts=2, deadline_s=1.0)
    assert time.monotonic() - began < 10
    message = str(caught.value)
    assert "(2 attempts): no answer within 1 s (last error: Cannot connect to host" in message
    assert tree_hashes(root) == local


def test_run_publishes_when_the_case_says_so(
    s3_bucket: Bucket, tmp_path: Path, installed_home: Callable[[str, str], str]
) -> None:
    """The whole path once: a tiny real run (one etcd member, 200 writes), then
    the upload its test case asks for."""
    home = installed_home("etcd", "3.5.17")
    case: dict[str, Any] = {
        "title": "publish after run",
        "workload": {"type": "write", "requests": 200, "key_size": 16, "value_size": 16},
        "databases": [{"id": "etcd", "kind": "etcd", "version": "3.5.17", "members": 1}],
        "publish": {"url": s3_bucket.url("from-run")},
    }
    case["workload"] |= {"clients": 4, "connections": 1}
    config = tmp_path / "case.yaml"
    config.write_text(yaml.safe_dump(case))
    out = tmp_path / "out"
    env = {**cloud_env(s3_bucket.env, tmp_path), "DBTESTER_HOME": home}
    result = _dbtester(env, "run", str(config), "--out", str(out), "--workers", "1", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"README: {s3_bucket.public('from-run')}/README.md" in result.stderr
    _check_published(s3_bucket, "from-run", out, tree_hashes(out))
    _no_marker_in(out)
