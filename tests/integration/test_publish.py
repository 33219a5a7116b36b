"""`dbtester publish` against real servers on loopback: moto's S3 server and
gcp-storage-emulator, through the real command line. Every object is read back
with a client of its own (boto3, the GCS JSON API) and compared with the local
files, which must not change."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from dbtester.errors import PublishError
from dbtester.publish import publish, published_readme
from dbtester.publish.upload import ATTEMPTS, BACKOFF_S, DEADLINE_S, MIN_RATE
from dbtester.report.charts import STANDARD
from dbtester.util import net
from tests.support.cases import make_case, write_case
from tests.support.cluster import VERSIONS
from tests.support.data import make_results, tree_hashes
from tests.support.s3 import FOREIGN, MARKER, Bucket, below, cloud_env, get, serve, tool

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


def _in_this_process(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``env``'s cloud settings (and none of the host's) for publish() here."""
    for name in [k for k in os.environ if k.startswith(FOREIGN) and k not in env]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith(FOREIGN):
            monkeypatch.setenv(name, value)


def test_dead_endpoint_fails_fast_then_the_retry_completes(
    s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_results(tmp_path / "results")
    local = tree_hashes(root)
    prefix = "after-a-failure"
    url = s3_bucket.url(prefix)
    dead = cloud_env({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{net.free_port()}"}, tmp_path)

    # Fast, as promised (dbtester/publish/upload.py): ATTEMPTS attempts at the
    # first file, each cut at its deadline (DEADLINE_S plus its size at
    # MIN_RATE), BACKOFF_S doubling between them. Timed in this process, so
    # that no interpreter's start is in it; s3fs is imported first.
    import s3fs  # type: ignore[import-untyped]  # noqa: F401

    _in_this_process(dead, monkeypatch)
    began = time.monotonic()
    with pytest.raises(PublishError, match=r"at charts/AVG-CPU\.svg \(3 attempts\)"):
        publish(root, url, quiet=True)
    seconds = time.monotonic() - began
    size = (root / "charts" / "AVG-CPU.svg").stat().st_size
    backoffs = sum(BACKOFF_S * 2**k for k in range(ATTEMPTS - 1))  # 1 + 2 s
    bound = ATTEMPTS * (DEADLINE_S + size / MIN_RATE) + backoffs
    # exact below (the backoffs are slept); above, the promised bound: a
    # refused connection takes none of its deadline, which leaves the rest
    # (planning the uploads, making the client) over 20 s
    assert backoffs <= seconds < bound, (seconds, bound)

    failed = _dbtester(dead, "publish", str(root), url)
    assert failed.returncode == 3, failed.stderr
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
    # imported before the clock starts, as publish() would (an import is no
    # attempt): without experimental bucket features, or each call waits 60 s
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs  # type: ignore[import-untyped]  # noqa: F401

    began = time.monotonic()
    with pytest.raises(PublishError) as caught:
        publish(root, "gs://results/x", quiet=True, attempts=2, deadline_s=1.0)
    seconds = time.monotonic() - began
    message = str(caught.value)
    assert "(2 attempts): no answer within 1 s (last error: Cannot connect to host" in message
    # Exact below: the last attempt ran to its 1 s deadline (the message says
    # so) after the backoff, which is slept. Above, what tells the deadline's
    # work from gcsfs's own: one attempt alone would retry for ~34 s; the
    # deadlines allow 3 s (+ the file's size at MIN_RATE), which leaves the
    # rest (planning, the client) 30 s.
    assert 1.0 + BACKOFF_S <= seconds < 34, seconds
    assert tree_hashes(root) == local


def test_run_publishes_when_the_case_says_so(
    s3_bucket: Bucket, tmp_path: Path, installed_home: Callable[[str, str], str]
) -> None:
    """The whole path once: a tiny real run (one etcd member, 200 writes), then
    the upload its test case asks for."""
    home = installed_home("etcd", VERSIONS["etcd"])
    case = make_case(
        title="publish after run",
        workload={
            "requests": 200,
            "key_size": 16,
            "value_size": 16,
            "clients": 4,
            "connections": 1,
        },
        publish={"url": s3_bucket.url("from-run")},
    )
    config = write_case(tmp_path / "case.yaml", case)
    out = tmp_path / "out"
    env = {**cloud_env(s3_bucket.env, tmp_path), "DBTESTER_HOME": home}
    result = _dbtester(env, "run", str(config), "--out", str(out), "--workers", "1", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"README: {s3_bucket.public('from-run')}/README.md" in result.stderr
    _check_published(s3_bucket, "from-run", out, tree_hashes(out))
    _no_marker_in(out)
