"""TLS and a user to the database under test, end to end: a 3-member etcd
and a 3-member Consul started with ``tls: true`` (mutual TLS for clients
and peers, certificates made for the run) and ``auth`` (etcd: the user
created and auth enabled; Consul: ACLs on, denying by default, bootstrapped
with the test case's token) are loaded, verified, faulted and checked, and
neither a key nor the secret is left in their results. On etcd, a test
case's own ``endpoints`` are reached with the files its ``tls`` names and
the password its ``auth`` file holds, and a CA that did not sign the
members, or a wrong password, fails the database at the start, with the
reason. ZooKeeper the same way: its ensemble on the secure client port with
the quorum over TLS and the load's parents behind the user's digest ACL,
and a wrong CA or password refused with the reason."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from dbtester.databases import KINDS
from dbtester.databases.base import Access, TlsFiles
from dbtester.util.certs import RunAuthority
from tests.support.cases import database, make_case
from tests.support.cluster import VERSIONS, cluster, run_case

pytestmark = pytest.mark.integration

PUTS = 4000
#: planted: no results file may hold either
PASSWORD = "planted-7c1e0b-password"
TOKEN = "9d3f1c2e-7c1e-4b0b-a5d4-3e2f1a0b9c8d"  # Consul's tokens are UUIDs
SECRETS = (PASSWORD.encode(), TOKEN.encode())


def _secrets_in(folder: Path) -> list[str]:
    """Files of the results that hold a private key (any PEM one) or a secret."""
    return [
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if path.is_file()
        and any(secret in path.read_bytes() for secret in (b"PRIVATE KEY", SECRETS[0], SECRETS[1]))
    ]


#: how each kind's members say they serve their clients over TLS
SECURE = {"etcd": "serving client traffic securely", "consul": "protocol=https"}
AUTH = {
    "etcd": {"user": "bench", "password_env": "DBTESTER_TEST_PASSWORD"},
    "zookeeper": {"user": "bench", "password_env": "DBTESTER_TEST_PASSWORD"},
    "consul": {"token_env": "DBTESTER_TEST_TOKEN"},
}


def test_members_started_with_tls_and_a_user_are_loaded_verified_faulted_and_checked(
    tmp_path: Path, installed_home: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBTESTER_TEST_PASSWORD", PASSWORD)
    monkeypatch.setenv("DBTESTER_TEST_TOKEN", TOKEN)
    for kind in SECURE:
        home = Path(installed_home(kind, VERSIONS[kind]))
    case = make_case(
        title="e2e tls",
        workload={"requests": PUTS, "rate": 1000, "check": {"clients": 4, "keys": 4}},
        faults=[
            {"at": "0.5s", "action": "snapshot", "member": "leader"},
            {"at": "1s", "action": "kill", "member": "leader"},
            {"at": "2s", "action": "restart"},
        ],
        # Consul's raft_multiplier 1: a new leader within the member's 1 s down
        databases=[
            database("etcd", "etcd", members=3, tls=True, auth=AUTH["etcd"]),
            database(
                "consul",
                "consul",
                members=3,
                tls=True,
                auth=AUTH["consul"],
                flags={"raft_multiplier": 1},
            ),
        ],
    )
    result, out = run_case(home, case, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "result.json").read_text())
    for db in summary["databases"]:
        kind = db["id"]
        run = json.loads((out / kind / "run.json").read_text())
        snapshot, kill, restart = run["faults"]
        assert not kill["error"] and not restart["error"], run["faults"]
        # the maintenance event went through dbtester's own client, over TLS too
        assert not snapshot["error"] and "from member" in snapshot["detail"], snapshot
        assert run["correctness"]["linearizable_keys"] == 4, (kind, run["correctness"])
        # every write answered and verified: with authentication on (Consul
        # denies anything a token does not allow), the load ran as the user
        assert db["figures"]["TOTAL-REQUEST-NUMBER"] == PUTS, kind
        logs = sorted((out / kind).glob("server-*-database.log"))
        assert len(logs) == 3, logs
        for log in logs:
            assert SECURE[kind] in log.read_text(), log
    etcd_logs = (out / "etcd").glob("server-*-database.log")
    assert any('"msg":"enabled authentication"' in log.read_text() for log in etcd_logs)
    assert _secrets_in(out) == []
    # the client's key lived in the run's scratch folder, gone with the run
    assert not (home / "runs" / summary["run_id"]).exists()


def test_endpoints_are_reached_with_the_case_files_and_wrong_ones_fail_at_the_start(
    tmp_path: Path, installed_home: Any
) -> None:
    errors = _good_and_wrong_files(tmp_path, installed_home("etcd", VERSIONS["etcd"]), "etcd")
    assert errors["good"] == "", errors
    assert "UnknownIssuer" in errors["wrong-ca"], errors
    assert "authentication failed" in errors["wrong-password"], errors


def _good_and_wrong_files(tmp_path: Path, home: str, kind: str) -> dict[str, str]:
    """A 1-member ``kind`` over TLS with the user made, then one run of three
    databases on it, each as _run says: the right files and password, a CA
    that did not sign the member, and a wrong password."""
    files = tmp_path / "tls"
    with cluster(kind, 1, tmp_path / "cluster", home, tls_in=files) as (peers, _):
        client = TlsFiles(files / "ca.pem", files / "client.pem", files / "client-key.pem")
        KINDS[kind].create_user(peers, Access(tls=client, user="bench", secret=PASSWORD))
        (tmp_path / "password").write_text(PASSWORD + "\n")
        (tmp_path / "wrong-password").write_text("not-the-password\n")
        (tmp_path / "other-ca.pem").write_text(RunAuthority("other").ca)
        # relative to the test case's folder
        keys = {"ca": "tls/ca.pem", "cert": "tls/client.pem", "key": "tls/client-key.pem"}
        auth = {"user": "bench", "password_file": "password"}
        endpoint: dict[str, Any] = {"endpoints": [peers[0].address("client")], "auth": auth}
        return _run(
            home,
            tmp_path,
            [
                database("good", kind, tls=keys, **endpoint),
                database("wrong-ca", kind, tls={**keys, "ca": "other-ca.pem"}, **endpoint),
                database(
                    "wrong-password",
                    kind,
                    tls=keys,
                    **{**endpoint, "auth": {**auth, "password_file": "wrong-password"}},
                ),
            ],
        )


def _run(home: str, folder: Path, databases: list[dict[str, Any]]) -> dict[str, str]:
    """Each database's error ("": none) and its requests' outcomes after one
    run of 300 writes to each, which must fail (some do); the one that
    passed wrote every key, and no secret is in the results."""
    # each entry its own objects: YAML would write shared ones as aliases
    own = json.loads(json.dumps(databases))
    case = make_case(title="e2e tls endpoints", workload={"requests": 300}, databases=own)
    result, out = run_case(home, case, folder)
    assert result.returncode == 1, result.stderr[-3000:]
    errors = {}
    for db in json.loads((out / "result.json").read_text())["databases"]:
        run = json.loads((out / db["id"] / "run.json").read_text())
        counts = (run["load"] or {}).get("counts")
        errors[db["id"]] = f"{run['error']} {counts}" if run["error"] else ""
        if not run["error"]:
            assert db["figures"]["TOTAL-REQUEST-NUMBER"] == 300, db["id"]
    assert _secrets_in(out) == []
    return errors


def test_a_consul_of_your_own_is_reached_with_its_token_and_a_wrong_one_fails(
    tmp_path: Path, installed_home: Any
) -> None:
    home = installed_home("consul", VERSIONS["consul"])
    files = tmp_path / "tls"
    with cluster("consul", 1, tmp_path / "cluster", home, tls_in=files, auth=True) as (peers, _):
        client = TlsFiles(files / "ca.pem", files / "client.pem", files / "client-key.pem")
        KINDS["consul"].create_user(peers, Access(tls=client, secret=TOKEN))
        (tmp_path / "token").write_text(TOKEN + "\n")
        (tmp_path / "wrong-token").write_text(str(uuid.uuid4()) + "\n")
        keys = {"ca": "tls/ca.pem", "cert": "tls/client.pem", "key": "tls/client-key.pem"}
        endpoint: dict[str, Any] = {"endpoints": [peers[0].address("client")], "tls": keys}
        errors = _run(
            home,
            tmp_path,
            [
                database("good", "consul", auth={"token_file": "token"}, **endpoint),
                database("wrong-token", "consul", auth={"token_file": "wrong-token"}, **endpoint),
            ],
        )
    assert errors["good"] == "", errors
    assert "HTTP-403" in errors["wrong-token"], errors


def test_zookeeper_on_its_secure_port_with_a_digest_user(
    tmp_path: Path, installed_home: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3-member ensemble started with TLS (clients on the secure port,
    the quorum too) and a digest user is loaded, faulted and checked; then a
    ZooKeeper of your own, its load parent guarded by the user's digest ACL,
    is reached with the case's files and refused a wrong CA or password."""
    monkeypatch.setenv("DBTESTER_TEST_PASSWORD", PASSWORD)
    home = installed_home("zookeeper", VERSIONS["zookeeper"])
    case = make_case(
        title="e2e zookeeper tls",
        workload={"requests": 2000, "rate": 500, "check": {"clients": 2, "keys": 2}},
        faults=[
            {"at": "1s", "action": "kill", "member": "leader"},
            {"at": "2s", "action": "restart"},
        ],
        databases=[database("zk", "zookeeper", members=3, tls=True, auth=AUTH["zookeeper"])],
    )
    result, out = run_case(home, case, tmp_path / "started")
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads((out / "zk" / "run.json").read_text())
    assert run["correctness"]["linearizable_keys"] == 2, run["correctness"]
    assert not any(fault["error"] for fault in run["faults"]), run["faults"]
    for log in sorted((out / "zk").glob("server-*-database.log")):
        assert "secure: true" in log.read_text(), log
    assert _secrets_in(out) == []

    errors = _good_and_wrong_files(tmp_path, home, "zookeeper")
    assert errors["good"] == "", errors
    assert "UnknownIssuer" in errors["wrong-ca"], errors
    assert "NoAuth" in errors["wrong-password"], errors
