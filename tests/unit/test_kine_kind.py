"""The kine kind's pure parts: its command line on each backend, the
PostgreSQL server member 0 runs beside it, and how many members a test
case may give it."""

from __future__ import annotations

from pathlib import Path

import pytest

import dbtester.databases.kine as kine_module
from dbtester.config.load import load_test_case_text
from dbtester.databases.base import COMPANION_DATA, MemberSpec, Peer
from dbtester.databases.kine import Kine, KineFlags
from dbtester.errors import ConfigError, MemberError
from dbtester.install import Installed

PG_PORTS = {"client": 2379, "postgres": 5432}


def _spec(tmp_path: Path, index: int, members: int, flags: KineFlags) -> MemberSpec:
    peers = tuple(Peer(f"m{i}", f"10.0.0.{i + 1}", PG_PORTS) for i in range(members))
    return MemberSpec(index, peers, flags, tmp_path / "m", tmp_path / "m" / "data", "run-7")


@pytest.fixture
def installed(tmp_path: Path) -> Installed:
    return Installed("kine", "0.17.5", tmp_path, "test", {"kine": "kine"}, "now")


@pytest.fixture
def postgres(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for Debian's server programs' folder (only their paths matter)."""
    binaries = tmp_path / "usr" / "lib" / "postgresql" / "15" / "bin"
    binaries.mkdir(parents=True)
    for name in ("postgres", "initdb"):
        (binaries / name).touch()
    monkeypatch.setattr(
        kine_module, "POSTGRES_BINARIES", str(tmp_path / "usr/lib/postgresql/*/bin")
    )
    return binaries


def test_sqlite_is_a_file_in_the_data_folder_and_needs_no_server(
    tmp_path: Path, installed: Installed
) -> None:
    plan = Kine().launch(installed, _spec(tmp_path, 0, 1, KineFlags()))
    endpoint = next(a for a in plan.argv if a.startswith("--endpoint="))
    assert endpoint.startswith(f"--endpoint=sqlite://{tmp_path / 'm' / 'data' / 'state.db'}?")
    assert plan.companion is None
    assert Kine().ports(KineFlags()) == {"client": 2379}


def test_postgres_members_all_reach_member_0s_server(
    tmp_path: Path, installed: Installed, postgres: Path
) -> None:
    flags = KineFlags(backend="postgres")
    for index in (0, 1, 2):
        plan = Kine().launch(installed, _spec(tmp_path, index, 3, flags))
        assert "--endpoint=postgres://dbtester@10.0.0.1:5432/kine?sslmode=disable" in plan.argv
        assert f"--listen-address=10.0.0.{index + 1}:2379" in plan.argv
        # only member 0 runs the server
        assert (plan.companion is not None) == (index == 0)
    assert Kine().ports(flags) == PG_PORTS
    assert Kine().first_serves_first(flags) and not Kine().first_serves_first(KineFlags())


def test_member_0s_server_is_made_for_the_run_and_listens_on_its_address(
    tmp_path: Path, installed: Installed, postgres: Path
) -> None:
    flags = KineFlags(backend="postgres", postgres_synchronous_commit="off")
    server = Kine().launch(installed, _spec(tmp_path, 0, 2, flags)).companion
    assert server is not None
    assert server.unprivileged  # PostgreSQL refuses root
    assert server.ready == ("10.0.0.1", 5432)
    assert server.argv[:3] == [str(postgres / "postgres"), "-D", COMPANION_DATA]
    settings = [server.argv[i + 1] for i, a in enumerate(server.argv) if a == "-c"]
    assert "listen_addresses=10.0.0.1" in settings
    assert "unix_socket_directories=" in settings  # TCP only: no socket folder to share
    assert "synchronous_commit=off" in settings
    (initdb,) = server.setup
    assert initdb[0] == str(postgres / "initdb") and "--username=dbtester" in initdb
    # every kine member connects over TCP without a password
    assert "host all all 0.0.0.0/0 trust" in server.files["pg_hba.conf"]


def test_without_a_postgres_server_the_start_says_which_package(
    tmp_path: Path, installed: Installed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kine_module, "POSTGRES_BINARIES", str(tmp_path / "none/*/bin"))
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(MemberError, match="apt-get install postgresql"):
        Kine().launch(installed, _spec(tmp_path, 0, 1, KineFlags(backend="postgres")))


CASE = """\
title: t
workload: {{type: write, requests: 10}}
databases:
  - id: k
    kind: kine
    version: "0.17.5"
{extra}
"""


def test_sqlite_takes_one_member_and_says_postgres_takes_more() -> None:
    with pytest.raises(ConfigError) as raised:
        load_test_case_text(CASE.format(extra="    members: 3"), "case.yaml")
    said = str(raised.value)
    assert said.startswith("case.yaml:7:"), said  # at the members key
    assert "kine takes at most 1 member, not 3" in said
    assert "backend: postgres takes several" in said


def test_postgres_takes_several_members_and_sqlite_defaults_to_one() -> None:
    several = CASE.format(extra="    members: 3\n    flags: {backend: postgres}")
    assert load_test_case_text(several, "case.yaml").case.databases[0].members == 3
    assert load_test_case_text(CASE.format(extra=""), "case.yaml").case.databases[0].members == 1
    with pytest.raises(ConfigError) as raised:
        load_test_case_text(CASE.format(extra="    flags: {backend: mysql}"), "case.yaml")
    assert "case.yaml:7:22: backend: 'mysql' is not allowed; allowed: 'sqlite', 'postgres'" in str(
        raised.value
    )


FAULTS = """\
faults:
  - {{at: 1s, action: {action}, member: database}}
"""


def test_a_fault_on_the_database_needs_a_kind_that_runs_one() -> None:
    postgres = CASE.format(extra="    flags: {backend: postgres}")
    case = load_test_case_text(postgres + FAULTS.format(action="kill"), "case.yaml").case
    assert case.faults[0].target == "database"
    with pytest.raises(ConfigError) as raised:  # kine on SQLite runs no server beside it
        load_test_case_text(CASE.format(extra="") + FAULTS.format(action="kill"), "case.yaml")
    assert "database k runs no server beside its members" in str(raised.value)
    assert str(raised.value).startswith("case.yaml:9:3:"), str(raised.value)  # at the fault
    with pytest.raises(ConfigError) as raised:  # only a kill or a pause reaches it
        load_test_case_text(postgres + FAULTS.format(action="isolate"), "case.yaml")
    assert "member: database (the server a member runs beside it) is for kill and pause" in str(
        raised.value
    )
