"""Every bad test case exits 2 with file:line:column and a message that says why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.bad_cases import CASES, GOOD


@pytest.mark.parametrize(
    ("text", "where", "needles"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_test_case(tmp_path: Path, run_cli, text, where, needles) -> None:
    config = tmp_path / "case.yaml"
    config.write_text(text)
    result = run_cli("validate", str(config))
    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    assert f"{config}:{where}:" in result.err, result.err
    for needle in needles:
        assert needle in result.err, result.err
    assert result.out == ""  # nothing claims success


def test_all_errors_are_reported_at_once(tmp_path: Path, run_cli) -> None:
    text = (
        GOOD.replace("type: write", "type: wirte").replace("3.5.17", "3.5") + "    flags: {x: 1}\n"
    )
    config = tmp_path / "many.yaml"
    config.write_text(text)
    result = run_cli("validate", str(config))
    assert result.code == 2
    assert "3 errors" in result.err
    lines = [
        line
        for line in result.err.splitlines()
        if re.match(rf"\s+{re.escape(str(config))}:\d+:\d+:", line)
    ]
    assert len(lines) == 3
    # sorted by position in the file
    positions = [tuple(int(n) for n in line.split(":")[1:3]) for line in lines]
    assert positions == sorted(positions)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such file"),
        ("", "the file is empty"),
        (b"\xff\xfe\x00", "not UTF-8"),
        ("# only a comment\n", "empty"),
    ],
)
def test_unreadable_or_empty_file(tmp_path: Path, run_cli, content, needle) -> None:
    config = tmp_path / "x.yaml"
    if isinstance(content, bytes):
        config.write_bytes(content)
    elif content is not None:
        config.write_text(content)
    result = run_cli("validate", str(config))
    assert result.code == 2
    assert str(config) in result.err and needle in result.err
    assert "Traceback" not in result.err


def test_directory_instead_of_file(tmp_path: Path, run_cli) -> None:
    result = run_cli("validate", str(tmp_path))
    assert result.code == 2
    assert "Traceback" not in result.err


def test_permission_denied(tmp_path: Path, run_cli) -> None:
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    config = tmp_path / "locked.yaml"
    config.write_text(GOOD)
    config.chmod(0)
    result = run_cli("validate", str(config))
    assert result.code == 2 and "permission denied" in result.err


def test_good_case_passes(tmp_path: Path, run_cli) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text(GOOD)
    result = run_cli("validate", str(config))
    assert result.code == 0, result.err
    assert "OK" in result.out and "write 100 requests" in result.out


def test_a_mistake_in_the_shared_workload_is_reported_once(tmp_path: Path, run_cli) -> None:
    """Every database inherits the test case's workload: its mistake is one
    error, at the workload, not one more per database; a database's own
    override is still reported at the database."""
    text = (
        "title: t\n"
        "workload: {type: write, requests: 10, clients: 5, connections: 10}\n"
        "databases:\n"
        "  - {id: a, kind: etcd, version: 3.5.17}\n"
        "  - {id: b, kind: etcd, version: 3.6.8}\n"
        "  - {id: c, kind: etcd, version: 3.6.8, workload: {requests: 0}}\n"
    )
    path = tmp_path / "case.yaml"
    path.write_text(text)
    result = run_cli("validate", str(path))
    assert result.code == 2
    lines = [line for line in result.err.splitlines() if "case.yaml:" in line]
    assert len(lines) == 2, result.err
    assert "case.yaml:2:" in lines[0] and "must not exceed clients" in lines[0]
    assert "case.yaml:6:" in lines[1] and "requests: 0" in lines[1]
