"""Integration tests use real database binaries, installed once per machine;
the load tests' slow gRPC server (``slow_server``) and moto's S3 server
(``s3_bucket``, for the publishing and history tests) are fixtures here.

They share one DBTESTER_HOME (``$DBTESTER_TEST_HOME``, default
``~/.cache/dbtester-tests``) so a second ``make test`` does not build again;
tests that need a clean slate make their own.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dbtester import slowdisk
from dbtester.install import Installed
from dbtester.util import net
from tests.support.home import home_at
from tests.support.s3 import Bucket, below, serve, tool


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


SLOWPUT = Path(__file__).parent / "slowput"


@pytest.fixture(scope="session")
def slowput_binary(shared_home: Path) -> Path:
    """tests/integration/slowput: a Go (standard library only) gRPC server that
    answers KV.Put after a fixed delay. `make test-tools` builds it into the
    test home before pytest; built here only when that one is missing or older
    than its source (this file run alone, or main.go changed)."""
    out = shared_home / "tools" / "slowput" / "slowput"
    newest = max(p.stat().st_mtime for p in SLOWPUT.iterdir())
    if out.exists() and out.stat().st_mtime >= newest:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # built aside and renamed: a parallel worker never runs half a binary
    partial = out.with_name(f".slowput-{os.getpid()}")
    subprocess.run(
        ["go", "build", "-o", str(partial), "."],
        cwd=SLOWPUT,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"},
    )
    partial.replace(out)
    return out


@pytest.fixture
def slow_server(slowput_binary: Path) -> Iterator[Callable[..., str]]:
    servers: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        process = subprocess.Popen([str(slowput_binary), *args], stdout=subprocess.PIPE, text=True)
        servers.append(process)
        assert process.stdout is not None
        return f"127.0.0.1:{process.stdout.readline().strip()}"

    yield start
    for process in servers:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="module")
def s3_bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bucket]:
    """A publicly readable bucket "results" on moto's S3 server on loopback,
    for the module; read back with boto3."""
    import boto3  # type: ignore[import-untyped]

    port = net.free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with serve([tool("moto_server"), "-H", "127.0.0.1", "-p", str(port)], port, log):
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_bucket(Bucket="results")
        # Publicly readable, as a bucket that serves published results is.
        statement = {
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::results/*",
        }
        policy = {"Version": "2012-10-17", "Statement": [statement]}
        client.put_bucket_policy(Bucket="results", Policy=json.dumps(policy))

        def objects(prefix: str) -> dict[str, bytes]:
            found = {}
            pages = client.get_paginator("list_objects_v2").paginate(Bucket="results")
            for page in pages:
                for item in page.get("Contents", []):
                    body = client.get_object(Bucket="results", Key=item["Key"])["Body"].read()
                    found[item["Key"]] = body
            return below(prefix, found)

        yield Bucket("s3", "results", endpoint, {"AWS_ENDPOINT_URL": endpoint}, objects)


@pytest.fixture(scope="session")
def slowfs(shared_home: Path) -> Installed:
    """The slow-disk layer's program, built into the test home once (a
    second call, or a parallel worker after the first, finds it)."""
    with home_at(shared_home):
        return slowdisk.install()
