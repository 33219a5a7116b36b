"""`dbtester install` with the real sources of this machine: Go builds through the
module proxy, Debian's packages, and versions that cannot be had."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest


def _version_of(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()[0]


@pytest.mark.slow
def test_etcd_go_build_once_then_instant(run_cli, use_shared_home: Path) -> None:
    first = run_cli("install", "etcd@3.5.17")
    assert first.code == 0, first.err
    root = use_shared_home / "etcd" / "3.5.17"
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["source"].startswith(("Go build", "release archive"))
    assert _version_of(root / "etcd") == "etcd Version: 3.5.17"
    stamp = (root / "etcd").stat().st_mtime_ns

    second = run_cli("install", "etcd@3.5.17")
    assert second.code == 0
    assert "trying" not in second.err  # no source was consulted
    assert json.loads((root / "manifest.json").read_text()) == manifest
    assert (root / "etcd").stat().st_mtime_ns == stamp

    listed = run_cli("install", "--list")
    assert "etcd@3.5.17" in listed.out


def test_etcd_34_from_debian_into_a_fresh_home(run_cli, tmp_path: Path, monkeypatch) -> None:
    if shutil.which("apt-cache") is None:
        pytest.skip("not a Debian machine: no apt-cache")
    monkeypatch.setenv("DBTESTER_HOME", str(tmp_path))
    result = run_cli("install", "etcd@3.4.23")
    assert result.code == 0, result.err
    assert "Debian package etcd-server" in result.out
    assert _version_of(tmp_path / "etcd" / "3.4.23" / "etcd") == "etcd Version: 3.4.23"


def test_zookeeper_from_debian(run_cli, tmp_path: Path, monkeypatch) -> None:
    if not Path("/usr/share/java/zookeeper.jar").exists():
        pytest.skip("Debian's zookeeper package is not installed (make setup installs it)")
    monkeypatch.setenv("DBTESTER_HOME", str(tmp_path))
    result = run_cli("install", "zookeeper@3.8.0")
    assert result.code == 0, result.err
    entry = json.loads((tmp_path / "zookeeper" / "3.8.0" / "manifest.json").read_text())["entry"]
    assert Path(entry["java"]).exists()
    assert "/usr/share/java/zookeeper.jar" in entry["classpath"].split(":")


def test_version_that_cannot_be_had(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DBTESTER_HOME", str(tmp_path))
    result = run_cli("install", "etcd@9.9.9")
    assert result.code == 2
    assert "cannot install etcd@9.9.9; tried:" in result.err
    for way in ("release archive", "Debian package etcd-server", "Go build"):
        assert way in result.err
    assert "Traceback" not in result.err
    assert not (tmp_path / "etcd" / "9.9.9").exists()


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("etcd", "expected KIND@VERSION"),
        ("mongo@1.0", "unknown kind 'mongo'; allowed: etcd, zookeeper, consul"),
        ("etcd@3.5;rm -rf /", "not a version"),
        ("etcd@../../x", "not a version"),
    ],
)
def test_bad_install_targets(run_cli, target: str, needle: str) -> None:
    result = run_cli("install", target)
    assert result.code == 2
    assert needle in result.err
