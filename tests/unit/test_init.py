"""``dbtester init``: the starter test case validates (through the real
loader) as written — by default, with hosts, and for every kind — and bad
input exits 2 without writing anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dbtester.config import load_test_case, load_test_case_text
from dbtester.databases import KINDS
from dbtester.errors import EXIT_BAD_INPUT, EXIT_OK, BadInputError
from dbtester.init import DEFAULT_TARGETS, DOCS, parse_hosts, starter_test_case
from tests.conftest import CONFIGS

#: a version of each kind that the shipped test cases use
VERSIONS = {
    "etcd": "3.6.8",
    "zookeeper": "3.8.0",
    "consul": "1.22.0",
    "kine": "0.17.5",
    "nats": "2.15.2",
}


def test_every_kind_has_a_version_here() -> None:
    assert set(VERSIONS) == set(KINDS)


def test_the_default_is_one_etcd_at_a_quickstart_version(run_cli: Any) -> None:
    quickstart = load_test_case(CONFIGS / "quickstart.yaml").case
    [(kind, version)] = DEFAULT_TARGETS
    assert (kind, version) in {(db.kind, db.version) for db in quickstart.databases}
    result = run_cli("init")
    assert result.code == EXIT_OK, result.err
    case = load_test_case_text(result.out).case
    [database] = case.databases
    assert (database.kind, database.version) == (kind, version)
    assert database.embedded and database.members == 3
    assert case.workload.type == "write"


def test_the_starter_says_what_each_section_is(run_cli: Any) -> None:
    text = run_cli("init").out
    for key in ("title:", "workload:", "repeat:", "databases:"):
        before = text.split(f"\n{key}", 1)[0]
        assert before.rstrip().splitlines()[-1].startswith("#"), f"no comment above {key}"
    assert f"see {DOCS}" in text.lower()


def test_with_hosts_every_database_runs_on_them(run_cli: Any) -> None:
    result = run_cli("init", "--hosts", "a,b,c", "--kind", "etcd@3.6.8", "--kind", "consul@1.22.0")
    assert result.code == EXIT_OK, result.err
    case = load_test_case_text(result.out).case
    assert [db.id for db in case.databases] == ["etcd-v3.6.8", "consul-v1.22.0"]
    for db in case.databases:
        assert [h.address for h in db.hosts] == ["a", "b", "c"] and db.member_count == 3
    assert "dbtester agents up" in result.out


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize(
    "hosts", [(), ("10.0.0.1", "10.0.0.2", "10.0.0.3")], ids=["local", "hosts"]
)
def test_each_kind_validates(kind: str, hosts: tuple[str, ...]) -> None:
    text = starter_test_case([(kind, VERSIONS[kind])], hosts)
    [database] = load_test_case_text(text).case.databases
    assert (database.kind, database.version) == (kind, VERSIONS[kind])


def test_every_kind_at_once(tmp_path: Path, run_cli: Any) -> None:
    out = tmp_path / "all.yaml"
    kinds = [f"--kind={kind}@{version}" for kind, version in VERSIONS.items()]
    result = run_cli("init", *kinds, "--out", str(out))
    assert result.code == EXIT_OK and result.out == "", result.err
    assert f"dbtester validate {out}" in result.err
    case = load_test_case(out).case
    assert [(db.kind, db.version) for db in case.databases] == list(VERSIONS.items())
    assert run_cli("validate", str(out)).code == EXIT_OK


def test_an_unknown_kind_exits_2_naming_the_allowed_ones(run_cli: Any) -> None:
    result = run_cli("init", "--kind", "nosuch@1")
    assert result.code == EXIT_BAD_INPUT and result.out == ""
    assert "'--kind'" in result.err and "nosuch" in result.err
    assert f"allowed: {', '.join(KINDS)}" in result.err
    with pytest.raises(BadInputError, match="allowed: etcd"):
        starter_test_case([("nosuch", "1")])


@pytest.mark.parametrize(
    "args",
    [
        ["--kind", "etcd"],  # no version
        ["--kind", "etcd@3/5"],  # not a version
        ["--hosts", "a,,b"],
        ["--hosts", "a b"],
        ["--hosts", "a,a"],
    ],
)
def test_bad_input_exits_2(args: list[str], run_cli: Any) -> None:
    result = run_cli("init", *args)
    assert result.code == EXIT_BAD_INPUT and result.out == "", result.err


def test_an_existing_out_needs_force(tmp_path: Path, run_cli: Any) -> None:
    out = tmp_path / "mine.yaml"
    out.write_text("keep me")
    result = run_cli("init", "--out", str(out))
    assert result.code == EXIT_BAD_INPUT and "pass --force" in result.err
    assert out.read_text() == "keep me"
    assert run_cli("init", "--out", str(out), "--force").code == EXIT_OK
    load_test_case(out)
    result = run_cli("init", "--out", str(tmp_path), "--force")
    assert result.code == EXIT_BAD_INPUT, result.err


def test_the_same_target_twice_is_one_database() -> None:
    text = starter_test_case([("etcd", "3.6.8"), ("etcd", "3.6.8")])
    assert len(load_test_case_text(text).case.databases) == 1


def test_versions_differing_only_in_case_get_distinct_ids() -> None:
    text = starter_test_case([("etcd", "3.6.8-RC"), ("etcd", "3.6.8-rc")])
    ids = [db.id for db in load_test_case_text(text).case.databases]
    assert ids == ["etcd-v3.6.8-rc", "etcd-v3.6.8-rc-2"]


def test_parse_hosts_keeps_the_order() -> None:
    assert parse_hosts(" c, a ,b ") == ("c", "a", "b")
    assert parse_hosts("[::1]") == ("[::1]",)


def test_out_into_a_folder_not_made_yet_makes_it(tmp_path: Path, run_cli: Any) -> None:
    out = tmp_path / "cases" / "new" / "mine.yaml"
    result = run_cli("init", "--out", str(out))
    assert result.code == 0, result.err
    assert out.is_file() and f"wrote {out}" in result.err
    assert load_test_case(out).case.databases[0].kind == "etcd"
