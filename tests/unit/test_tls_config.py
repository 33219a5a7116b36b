"""TLS to the databases, the parts without a database: the test case's
``tls`` keys, the run's certificates, and what reaches the engine's plan."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from dbtester.config import load_test_case
from dbtester.config.model import DatabaseSpec
from dbtester.control.access import endpoint_access, members_access
from dbtester.databases.base import Peer
from dbtester.errors import DbtesterError
from dbtester.load.native import plan
from dbtester.workloads import workload_of
from tests.support.cases import database, make_case, write_case
from tests.support.cluster import settings_for

PEERS = [Peer(f"m{i}", f"10.0.0.{i + 1}", {"client": 2379, "peer": 2380}) for i in range(3)]


def _spec(tmp_path: Path, **keys: Any) -> DatabaseSpec:
    case = make_case(databases=[database("db", "etcd", **keys)])
    return load_test_case(write_case(tmp_path / "case.yaml", case)).case.databases[0]


def test_relative_tls_paths_are_taken_from_the_test_case_folder(tmp_path: Path) -> None:
    folder = tmp_path / "cases"
    folder.mkdir()
    keys = {"ca": "certs/ca.pem", "cert": "/abs/client.pem", "key": "k.pem"}
    db = _spec(folder, endpoints=["10.0.0.1:2379"], tls=keys)
    assert not isinstance(db.tls, bool)
    assert db.tls.ca == str(folder / "certs" / "ca.pem")
    assert db.tls.cert == "/abs/client.pem"
    assert db.tls.key == str(folder / "k.pem")


def test_a_missing_or_foreign_file_names_its_key_and_path(tmp_path: Path) -> None:
    db = _spec(tmp_path, endpoints=["10.0.0.1:2379"], tls={"ca": "ca.pem"})
    with pytest.raises(DbtesterError, match=r"db: tls\.ca .*ca\.pem: No such file"):
        endpoint_access(db)
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    with pytest.raises(DbtesterError, match=r"tls\.ca .*ca\.pem holds no PEM text"):
        endpoint_access(db)


def test_each_member_gets_a_certificate_for_its_host_from_the_runs_ca(tmp_path: Path) -> None:
    db = _spec(tmp_path, members=3, tls=True)
    made = members_access(db, PEERS, tmp_path / "tls")
    assert made.access.tls is not None
    ca = x509.load_pem_x509_certificate(made.access.tls.ca.read_bytes())
    for peer, identity in zip(PEERS, made.identities, strict=True):
        cert = x509.load_pem_x509_certificate(identity.cert.encode())
        cert.verify_directly_issued_by(ca)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        addresses = names.get_values_for_type(x509.IPAddress)
        assert ipaddress.ip_address(peer.host) in addresses
        assert ipaddress.ip_address("127.0.0.1") in addresses
        assert "localhost" in names.get_values_for_type(x509.DNSName)
        # a member is a server to clients and a client to its peers
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(usage) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        assert "PRIVATE KEY" not in repr(identity)
    # the client's key: this user's alone
    key = made.access.tls.key
    assert key is not None and stat.S_IMODE(key.stat().st_mode) == 0o600
    # plaintext members get nothing
    assert members_access(_spec(tmp_path), PEERS, tmp_path / "none").identities == ()


def test_the_engine_plan_carries_the_pem_text_only_with_tls(tmp_path: Path) -> None:
    db = _spec(tmp_path, members=3, tls=True)
    access = members_access(db, PEERS, tmp_path / "tls").access
    workload = workload_of(type="write", requests=10, clients=1, connections=1)
    plain = plan("etcd", settings_for(PEERS), workload)
    assert "tls" not in plain
    secure = plan("etcd", settings_for(PEERS, access=access), workload)
    tls = secure["tls"]
    assert tls is not None and tls["key"] is not None
    assert tls["ca"].startswith("-----BEGIN CERTIFICATE-----")
    assert "PRIVATE KEY" in tls["key"] and tls["server_name"] is None


def test_zookeeper_members_with_tls_take_clients_on_the_secure_port_only(tmp_path: Path) -> None:
    from dbtester.databases.base import MemberSpec, MemberTls
    from dbtester.databases.zookeeper import ZooKeeper, ZooKeeperFlags
    from dbtester.install import Installed

    peers = tuple(
        Peer(f"m{i}", f"10.0.0.{i + 1}", {"client": 2181, "peer": 2888, "election": 3888})
        for i in range(3)
    )
    installed = Installed(
        "zookeeper", "3.8.0", tmp_path, "test", {"java": "java", "classpath": "zk.jar"}, "now"
    )
    tls = MemberTls(ca="CA\n", cert="CERT\n", key="KEY\n")
    spec = MemberSpec(1, peers, ZooKeeperFlags(), tmp_path / "m", tmp_path / "m" / "data", "t", tls)
    files = {path.name: text for path, text in ZooKeeper().launch(installed, spec).files.items()}
    settings = dict(line.split("=", 1) for line in files["zoo.cfg"].splitlines())
    assert "clientPort" not in settings and "clientPortAddress" not in settings
    assert (settings["secureClientPort"], settings["secureClientPortAddress"]) == (
        "2181",
        "10.0.0.2",
    )
    assert settings["sslQuorum"] == "true" and settings["ssl.quorum.clientAuth"] == "need"
    assert settings["ssl.keyStore.location"] == str(spec.tls_dir / "identity.pem")
    # ZooKeeper's PEM key store: the key and its certificate in one file
    assert files["identity.pem"] == "KEY\nCERT\n" and files["ca.pem"] == "CA\n"
    plain = ZooKeeper().launch(
        installed, MemberSpec(1, peers, ZooKeeperFlags(), tmp_path, tmp_path, "t")
    )
    assert "clientPort=2181" in plain.files[tmp_path / "zoo.cfg"] and "ssl" not in str(plain.files)


def test_validate_names_the_tls_and_the_user_never_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dbtester.cli import describe_database

    monkeypatch.setenv("BENCH_PASSWORD", "planted-secret")
    auth = {"user": "bench", "password_env": "BENCH_PASSWORD"}
    line = describe_database(_spec(tmp_path, members=3, tls=True, auth=auth))
    said = "mutual TLS (certificates made for the run), as bench (password_env BENCH_PASSWORD)"
    assert said in line and "planted-secret" not in line, line


def test_etcd_members_serve_metrics_in_plain_http_whatever_their_clients_use(
    tmp_path: Path,
) -> None:
    from dbtester.databases.base import MemberSpec, MemberTls
    from dbtester.databases.etcd import Etcd, EtcdFlags
    from dbtester.install import Installed

    ports = {"client": 2379, "peer": 2380, "http": 2382, "metrics": 2381}
    peers = tuple(Peer(f"m{i}", f"10.0.0.{i + 1}", ports) for i in range(3))
    installed = Installed("etcd", "3.6.8", tmp_path, "test", {"etcd": "etcd"}, "now")
    tls = MemberTls(ca="CA\n", cert="CERT\n", key="KEY\n")
    for member_tls in (None, tls):
        spec = MemberSpec(1, peers, EtcdFlags(), tmp_path, tmp_path / "data", "t", member_tls)
        argv = Etcd().launch(installed, spec).argv
        # the agent on the member's host reads its size there, without a
        # client's certificate or credentials
        assert "--listen-metrics-urls=http://10.0.0.2:2381" in argv
    assert "--listen-client-urls=https://10.0.0.2:2379" in argv
