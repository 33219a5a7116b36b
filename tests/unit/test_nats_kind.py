"""The nats kind's pure parts: its servers' configuration, the KV key a
dbtester key becomes, and what a test case may ask of it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from dbtester.config.load import load_test_case_text
from dbtester.databases.base import MemberSpec, Peer
from dbtester.databases.nats import (
    Nats,
    NatsFlags,
    _said,
    _stream_leader,
    _until_made,
    kv_key,
)
from dbtester.errors import ConfigError
from dbtester.install import Installed

PORTS = {"client": 4222, "cluster": 6222, "monitor": 8222}


def _config(tmp_path: Path, members: int, flags: NatsFlags) -> dict[str, object]:
    peers = tuple(Peer(f"n{i}", f"10.0.0.{i + 1}", PORTS) for i in range(members))
    installed = Installed("nats", "2.15.2", tmp_path, "test", {"nats-server": "ns"}, "now")
    spec = MemberSpec(0, peers, flags, tmp_path / "m", tmp_path / "m" / "data", "run-7")
    plan = Nats().launch(installed, spec)
    assert plan.argv == ["ns", "--config", str(tmp_path / "m" / "nats.json")]
    loaded = json.loads(plan.files[tmp_path / "m" / "nats.json"])
    assert isinstance(loaded, dict)
    return loaded


def test_members_route_to_each_other_and_keep_jetstream_in_their_data(tmp_path: Path) -> None:
    config = _config(tmp_path, 3, NatsFlags(sync_interval="always"))
    assert (config["server_name"], config["host"], config["port"]) == ("n0", "10.0.0.1", 4222)
    assert config["http"] == "10.0.0.1:8222"
    assert config["jetstream"] == {
        "store_dir": str(tmp_path / "m" / "data"),
        "sync_interval": "always",
    }
    assert config["cluster"] == {
        "name": "run-7",
        "host": "10.0.0.1",
        "port": 6222,
        "routes": ["nats-route://10.0.0.2:6222", "nats-route://10.0.0.3:6222"],
    }


def test_one_member_has_no_cluster_and_nats_own_sync(tmp_path: Path) -> None:
    config = _config(tmp_path, 1, NatsFlags())
    assert "cluster" not in config
    assert config["jetstream"] == {"store_dir": str(tmp_path / "m" / "data")}


def test_a_key_first_character_is_a_subject_token_of_its_own() -> None:
    assert kv_key("k0000012") == "k.0000012"
    assert kv_key("c3") == "c.3"


def test_the_leader_is_the_bucket_stream_leader() -> None:
    jsz = {
        "meta_cluster": {"leader": "n0"},
        "account_details": [
            {"stream_detail": [{"name": "OTHER", "cluster": {"leader": "n1"}}]},
            {"stream_detail": [{"name": "KV_dbtester", "cluster": {"leader": "n2"}}]},
        ],
    }
    assert _stream_leader(jsz) == "n2"
    assert _stream_leader({"meta_cluster": {"leader": "n0"}}) is None


CASE = """\
title: t
workload: {{type: write, requests: 10}}
databases:
  - id: a
    kind: nats
    version: "2.15.2"
{extra}
"""


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("    members: 6", "nats takes at most 5 members"),
        ("    flags: {sync_interval: sometimes}", "sync_interval must be always, or a duration"),
        ("    client: {replicas: 6}", "replicas"),
        ("    client: {storage: disk}", "allowed: 'file', 'memory'"),
    ],
)
def test_what_nats_cannot_take_is_refused_at_its_line(extra: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_test_case_text(CASE.format(extra=extra), "case.yaml")
    assert says in str(raised.value)
    assert "case.yaml:7:" in str(raised.value), str(raised.value)


def test_serializable_reads_need_the_bucket_direct_gets() -> None:
    text = CASE.format(extra="    client: {allow_direct: false}").replace(
        "{type: write, requests: 10}", "{type: read, requests: 10, consistency: serializable}"
    )
    with pytest.raises(ConfigError) as raised:
        load_test_case_text(text, "case.yaml")
    assert str(raised.value).startswith("case.yaml:2:"), str(raised.value)
    assert "nats cannot: serializable reads are direct gets" in str(raised.value)
    # with direct gets (the default) it is a test case
    allowed = CASE.format(extra="").replace(
        "{type: write, requests: 10}", "{type: read, requests: 10, consistency: serializable}"
    )
    assert load_test_case_text(allowed, "case.yaml").case.databases[0].kind == "nats"


def _refusing(errors: list[BaseException]) -> tuple[Callable[[], Awaitable[object]], list[int]]:
    """A bucket creation refused with each of ``errors`` in turn, then made."""
    calls: list[int] = []

    async def make() -> object:
        calls.append(len(calls))
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "made"

    return make, calls


def test_a_bucket_refused_while_jetstream_settles_is_asked_again() -> None:
    from nats.js.errors import BadRequestError, ServiceUnavailableError

    make, calls = _refusing([BadRequestError(code=400), ServiceUnavailableError(code=503)])
    asyncio.run(_until_made(make, pause_s=0.0))
    assert len(calls) == 3


def test_a_bucket_of_another_config_is_refused_at_once_and_said() -> None:
    from nats.js.errors import BadRequestError

    other = BadRequestError(
        code=400, err_code=10058, description="stream name already in use with a different"
    )
    make, calls = _refusing([other, other])
    with pytest.raises(BadRequestError):
        asyncio.run(_until_made(make, pause_s=0.0))
    assert len(calls) == 1
    assert _said(other) == (
        "stream name already in use with a different (JetStream 400, error 10058)"
    )
    assert _said(TimeoutError()) == "TimeoutError()"
