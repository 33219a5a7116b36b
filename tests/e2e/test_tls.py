"""TLS and a user to the database under test, end to end on etcd: a
3-member cluster started with ``tls: true`` (mutual TLS for clients and
peers, certificates made for the run) and ``auth`` (the user created, auth
enabled) is loaded, verified, faulted and checked, and neither a key nor
the password is left in its results; a test case's own ``endpoints`` are
reached with the files its ``tls`` names and the password its ``auth``
file holds, and a CA that did not sign the members, or a wrong password,
fails the database at the start, with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dbtester.databases import KINDS
from dbtester.databases.base import Access, TlsFiles
from dbtester.util.certs import RunAuthority
from tests.support.cases import database, make_case, write_case
from tests.support.cluster import VERSIONS, cluster, dbtester

pytestmark = pytest.mark.integration

PUTS = 4000
#: planted: no results file may hold it
PASSWORD = "planted-7c1e0b-password"


def _secrets_in(folder: Path) -> list[str]:
    """Files of the results that hold a private key (any PEM one) or the password."""
    return [
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if path.is_file()
        and (b"PRIVATE KEY" in path.read_bytes() or PASSWORD.encode() in path.read_bytes())
    ]


def test_members_started_with_tls_and_a_user_are_loaded_verified_faulted_and_checked(
    tmp_path: Path, installed_home: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBTESTER_TEST_PASSWORD", PASSWORD)
    home = Path(installed_home("etcd", VERSIONS["etcd"]))
    case = make_case(
        title="e2e tls",
        workload={"requests": PUTS, "rate": 1000, "check": {"clients": 4, "keys": 4}},
        faults=[
            {"at": "0.5s", "action": "compact"},
            {"at": "1s", "action": "kill", "member": "leader"},
            {"at": "2s", "action": "restart"},
        ],
        databases=[
            database(
                "etcd",
                "etcd",
                members=3,
                tls=True,
                auth={"user": "bench", "password_env": "DBTESTER_TEST_PASSWORD"},
            )
        ],
    )
    out = tmp_path / "results"
    result = dbtester(home, "run", str(write_case(tmp_path / "case.yaml", case)), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads((out / "etcd" / "run.json").read_text())
    compact, kill, restart = run["faults"]
    assert not kill["error"] and not restart["error"], run["faults"]
    # the maintenance event went through dbtester's own client, over TLS too
    assert not compact["error"] and compact["detail"].startswith("to revision"), compact
    assert run["correctness"]["linearizable_keys"] == 4, run["correctness"]
    figures = json.loads((out / "result.json").read_text())["databases"][0]["figures"]
    assert figures["TOTAL-REQUEST-NUMBER"] == PUTS
    # every member served its clients over TLS (etcd says so as it starts)
    logs = sorted((out / "etcd").glob("server-*-database.log"))
    assert len(logs) == 3, logs
    for log in logs:
        assert "serving client traffic securely" in log.read_text(), log
    # authentication was on: the leader logged enabling it
    assert any('"msg":"enabled authentication"' in log.read_text() for log in logs)
    assert _secrets_in(out) == []
    # the client's key lived in the run's scratch folder, gone with the run
    assert not list((home / "runs").rglob("client-key.pem"))


def test_endpoints_are_reached_with_the_case_files_and_wrong_ones_fail_at_the_start(
    tmp_path: Path, installed_home: Any
) -> None:
    home = installed_home("etcd", VERSIONS["etcd"])
    files = tmp_path / "tls"
    with cluster("etcd", 1, tmp_path / "cluster", home, tls_in=files) as (peers, _):
        client = TlsFiles(files / "ca.pem", files / "client.pem", files / "client-key.pem")
        KINDS["etcd"].create_user(peers, Access(tls=client, user="bench", secret=PASSWORD))
        (tmp_path / "password").write_text(PASSWORD + "\n")
        # relative to the test case's folder
        keys = {"ca": "tls/ca.pem", "cert": "tls/client.pem", "key": "tls/client-key.pem"}
        auth = {"user": "bench", "password_file": "password"}
        endpoint = peers[0].address("client")
        case = make_case(
            title="e2e tls endpoints",
            workload={"requests": 500},
            databases=[database("etcd", "etcd", endpoints=[endpoint], tls=keys, auth=auth)],
        )
        out = tmp_path / "results"
        result = dbtester(
            home, "run", str(write_case(tmp_path / "case.yaml", case)), "--out", str(out)
        )
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads((out / "result.json").read_text())
        assert summary["databases"][0]["figures"]["TOTAL-REQUEST-NUMBER"] == 500
        assert _secrets_in(out) == []

        (tmp_path / "other-ca.pem").write_text(RunAuthority("other").ca)
        case["databases"][0]["tls"] = {**keys, "ca": "other-ca.pem"}
        wrong_ca = _failed_run(home, tmp_path, "wrong-ca", case)
        (tmp_path / "wrong-password.txt").write_text("not-the-password\n")
        case["databases"][0]["tls"] = keys
        case["databases"][0]["auth"] = {**auth, "password_file": "wrong-password.txt"}
        wrong_password = _failed_run(home, tmp_path, "wrong-password", case)
    assert "UnknownIssuer" in wrong_ca, wrong_ca
    assert "authentication failed" in wrong_password, wrong_password


def _failed_run(home: str, folder: Path, name: str, case: dict[str, Any]) -> str:
    """The stderr of a run of ``case`` that must fail (exit 1)."""
    config = write_case(folder / f"{name}.yaml", case)
    result = dbtester(Path(home), "run", str(config), "--out", str(folder / name))
    assert result.returncode == 1, result.stderr[-3000:]
    return result.stderr
