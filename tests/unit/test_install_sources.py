"""Install sources against real HTTP servers on loopback: checksums, timeouts, fall-through."""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dbtester import install
from dbtester.errors import InstallError
from dbtester.install import (
    ArchiveDownload,
    Installed,
    Source,
    SourceUnavailable,
    ensure_installed,
)
from dbtester.util.progress import Reporter


def _tarball(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def http_files() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A real HTTP server on loopback serving whatever the test puts in the dict."""
    files: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", files
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DBTESTER_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _archive_source(base: str) -> ArchiveDownload:
    return ArchiveDownload(
        url=f"{base}/db-1.0.tar.gz",
        checksum_url=f"{base}/SUMS",
        locate=lambda root: {"db": str(root / "db-1.0" / "db")},
    )


def test_archive_installs_and_second_call_is_instant(http_files, home: Path) -> None:
    base, files = http_files
    blob = _tarball({"db-1.0/db": b"#!/bin/sh\necho db 1.0\n", "db-1.0/README": b"x"})
    files["/db-1.0.tar.gz"] = blob
    files["/SUMS"] = f"{hashlib.sha256(blob).hexdigest()}  db-1.0.tar.gz\n".encode()
    done = ensure_installed("db", "1.0", [_archive_source(base)], Reporter(quiet=True))
    assert done.root == home / "db" / "1.0"
    assert done.path("db").read_bytes().startswith(b"#!/bin/sh")
    assert done.path("db").stat().st_mode & 0o111
    assert "release archive" in done.source
    # the second call must not touch any source: a source that fails proves it
    files.clear()

    class Exploding(Source):
        description = "must not be used"

        def fetch(self, dest: Path, reporter: Reporter) -> dict[str, str]:
            raise AssertionError("a source was tried for an installed version")

    again = ensure_installed("db", "1.0", [Exploding()], Reporter(quiet=True))
    assert again == done
    assert [i.version for i in install.list_installed()] == ["1.0"]


def test_checksum_mismatch_is_refused_and_leaves_nothing(http_files, home: Path) -> None:
    base, files = http_files
    files["/db-1.0.tar.gz"] = _tarball({"db-1.0/db": b"evil"})
    files["/SUMS"] = b"0" * 64 + b"  db-1.0.tar.gz\n"
    with pytest.raises(InstallError, match="checksum mismatch"):
        ensure_installed("db", "1.0", [_archive_source(base)], Reporter(quiet=True))
    assert not (home / "db" / "1.0").exists()
    assert list((home / "db").iterdir()) == [home / "db" / ".1.0.lock"]


def test_missing_binary_in_archive(http_files) -> None:
    base, files = http_files
    blob = _tarball({"other/file": b"x"})
    files["/db-1.0.tar.gz"] = blob
    files["/SUMS"] = f"{hashlib.sha256(blob).hexdigest()}  db-1.0.tar.gz\n".encode()
    with pytest.raises(InstallError, match="has no"):
        ensure_installed("db", "1.0", [_archive_source(base)], Reporter(quiet=True))


def test_deleted_binary_means_reinstall(http_files) -> None:
    base, files = http_files
    blob = _tarball({"db-1.0/db": b"v1"})
    files["/db-1.0.tar.gz"] = blob
    files["/SUMS"] = f"{hashlib.sha256(blob).hexdigest()}  db-1.0.tar.gz\n".encode()
    first = ensure_installed("db", "1.0", [_archive_source(base)], Reporter(quiet=True))
    first.path("db").unlink()
    assert install.find_installed("db", "1.0") is None
    second = ensure_installed("db", "1.0", [_archive_source(base)], Reporter(quiet=True))
    assert second.path("db").read_bytes() == b"v1"


def test_a_server_that_never_answers_falls_through_within_seconds(http_files) -> None:
    """A download that hangs must give up (CONNECT_TIMEOUT_S) and try the next source."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections into the backlog, never answers
    port = silent.getsockname()[1]
    base, files = http_files
    blob = _tarball({"db-1.0/db": b"ok"})
    files["/db-1.0.tar.gz"] = blob
    files["/SUMS"] = f"{hashlib.sha256(blob).hexdigest()}  db-1.0.tar.gz\n".encode()
    try:
        start = time.monotonic()
        done = ensure_installed(
            "db",
            "1.0",
            [_archive_source(f"http://127.0.0.1:{port}"), _archive_source(base)],
            Reporter(quiet=True),
        )
        waited = time.monotonic() - start
    finally:
        silent.close()
    assert done.path("db").read_bytes() == b"ok"
    # one timeout for the checksum file, not a hang (generous bound: 6x the timeout)
    assert waited < install.CONNECT_TIMEOUT_S * 6


def test_every_failure_is_listed(tmp_path: Path) -> None:
    class Fails(Source):
        def __init__(self, name: str) -> None:
            self.name = name

        @property
        def description(self) -> str:
            return self.name

        def fetch(self, dest: Path, reporter: Reporter) -> dict[str, str]:
            raise SourceUnavailable(f"{self.name} said no")

    with pytest.raises(InstallError) as caught:
        ensure_installed("db", "2.0", [Fails("first"), Fails("second")], Reporter(quiet=True))
    message = str(caught.value)
    assert "cannot install db@2.0" in message
    assert "first: first said no" in message and "second: second said no" in message
    assert caught.value.exit_code == 2


def test_reporter_progress_without_terminal() -> None:
    stream = io.StringIO()
    reporter = Reporter(stream)
    with reporter.timer("building x"):
        pass
    with reporter.bytes_bar("downloading y", 10) as advance:
        advance(10)
    text = stream.getvalue()
    assert "building x ..." in text and "done in" in text and "downloading y ..." in text


def test_the_installed_digest_covers_every_file_the_entry_names(tmp_path: Path) -> None:
    """A classpath names several files; a value that is not a file (a flag,
    a relative name) is not part of the digest."""
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    for jar, body in zip(jars, (b"one", b"two"), strict=True):
        jar.write_bytes(body)
    entry = {"classpath": ":".join(map(str, jars)), "java": "java"}
    installed = Installed("zookeeper", "3.8.0", tmp_path, "test", entry, "")
    assert installed.files() == jars
    before = installed.sha256()
    assert before == Installed("zookeeper", "3.8.0", tmp_path, "x", dict(entry), "").sha256()
    jars[1].write_bytes(b"two, rebuilt")
    assert installed.sha256() != before
    # moving bytes from one file to the next is a different build too
    jars[0].write_bytes(b"onetwo, rebuil")
    jars[1].write_bytes(b"t")
    assert installed.sha256() != before
    jars[0].write_bytes(b"one")
    jars[1].write_bytes(b"two")
    assert installed.sha256() == before


_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _coordinates(pom: str, path: str) -> list[str]:
    """group:artifact[:version] of each dependency at ``path`` in ``pom``."""
    import xml.etree.ElementTree as ET

    found = []
    for dependency in ET.fromstring(pom).findall(path, _POM_NS):
        parts = [dependency.findtext(f"m:{key}", namespaces=_POM_NS) for key in _KEYS]
        found.append(":".join(part for part in parts if part))
    return found


_KEYS = ("groupId", "artifactId", "version")


def test_zookeeper_from_maven_brings_what_its_release_ships_beside_it() -> None:
    """ZooKeeper 3.6 on needs its metrics library, a ``provided`` dependency
    Maven never resolves for a dependent; its parent pom pins the version."""
    from dbtester.databases.zookeeper import ZooKeeper
    from dbtester.install import MavenArtifacts

    def pom(version: str) -> str:
        sources = ZooKeeper().install_sources(version)
        (maven,) = [s for s in sources if isinstance(s, MavenArtifacts)]
        return maven.pom()

    wanted = _coordinates(pom("3.8.4"), "m:dependencies/m:dependency")
    assert wanted == [
        "org.apache.zookeeper:zookeeper:3.8.4",
        "io.dropwizard.metrics:metrics-core",
        "org.xerial.snappy:snappy-java",
    ]
    managed = _coordinates(pom("3.8.4"), "m:dependencyManagement/m:dependencies/m:dependency")
    assert managed == ["org.apache.zookeeper:parent:3.8.4"]
    # before 3.6 there was no metrics library to bring
    old = _coordinates(pom("3.5.9"), "m:dependencies/m:dependency")
    assert old == ["org.apache.zookeeper:zookeeper:3.5.9"]
