"""Pure logic of `dbtester agents`: which agents a test case needs, the host
keys' fingerprints, the pidfile, the token file."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
from pathlib import Path, PurePosixPath

import paramiko
import pytest
import yaml

from dbtester.agent.pidfile import is_agent, pidfile
from dbtester.config.load import load_test_case_text
from dbtester.control.agents import ensure_remote_token, remote_token
from dbtester.errors import ConfigError, DbtesterError, RemoteError
from dbtester.remote import AgentHost, agent_hosts
from dbtester.remote.ssh import fingerprint
from tests.support.poll import poll_until

CASE = """
title: t
workload: {{type: write, requests: 10}}
databases:
  - id: a
    kind: etcd
    version: 3.5.17
    hosts: {a_hosts}
  - id: b
    kind: etcd
    version: 3.6.8
    hosts: {b_hosts}
"""


def _case(a_hosts: str, b_hosts: str) -> str:
    return CASE.format(a_hosts=a_hosts, b_hosts=b_hosts)


def test_agents_are_merged_across_databases() -> None:
    text = _case(
        "[{address: 10.0.0.1}, {address: 10.0.0.2, ssh_user: ops, ssh_port: 2222}]",
        "[{address: 10.0.0.2, ssh_user: ops, ssh_port: 2222}, {address: 10.0.0.3}]",
    )
    hosts = agent_hosts(load_test_case_text(text).case, ssh_user="me")
    assert [h.name for h in hosts] == ["10.0.0.1:3500", "10.0.0.2:3500", "10.0.0.3:3500"]
    assert str(hosts[0].ssh) == "me@10.0.0.1:22"
    assert str(hosts[1].ssh) == "ops@10.0.0.2:2222"
    assert hosts[1].installs == (("etcd", "3.5.17"), ("etcd", "3.6.8"))
    assert hosts[2].installs == (("etcd", "3.6.8"),)


def test_one_agent_with_two_ssh_settings_is_an_error() -> None:
    text = _case("[{address: 10.0.0.1, ssh_port: 22}]", "[{address: 10.0.0.1, ssh_port: 2200}]")
    with pytest.raises(RemoteError, match=r"10\.0\.0\.1:3500 appears twice"):
        agent_hosts(load_test_case_text(text).case)


@pytest.mark.parametrize("agent_dir", ["/", ".", "~", "a/../..", "x y", "$(rm -rf ~)"])
def test_agent_dir_must_be_a_plain_directory(agent_dir: str) -> None:
    text = _case(f"[{{address: 10.0.0.1, agent_dir: '{agent_dir}'}}]", "[]")
    with pytest.raises(ConfigError, match="agent_dir"):
        load_test_case_text(text)


def test_ssh_user_is_checked() -> None:
    with pytest.raises(ConfigError, match="ssh_user"):
        load_test_case_text(_case("[{address: 10.0.0.1, ssh_user: 'root; id'}]", "[]"))


def test_fingerprint_matches_ssh_keygen(tmp_path: Path) -> None:
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public = paramiko.Ed25519Key.from_private_key_file(str(key))
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-f", f"{key}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert fingerprint(public) == listed
    raw = base64.b64decode(Path(f"{key}.pub").read_text().split()[1])
    expected = base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
    assert listed == f"SHA256:{expected}"


def test_pidfile_is_held_and_removed(tmp_path: Path) -> None:
    path = tmp_path / "agent.pid"
    with pidfile(path):
        assert path.read_text().strip() == str(os.getpid())
    assert not path.exists()


def test_pidfile_of_a_dead_or_foreign_process_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "agent.pid"
    path.write_text("1\n")  # init: alive, but not an agent
    assert not is_agent(1)
    with pidfile(path):
        assert path.read_text().strip() == str(os.getpid())


def test_second_agent_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "agent.pid"
    fake = subprocess.Popen(
        # the stimulus: a process named like an agent that outlives the test
        [sys.executable, "-c", "import time; time.sleep(30)", "dbtester", "agent", "serve"]
    )
    try:
        path.write_text(f"{fake.pid}\n")
        poll_until(lambda: is_agent(fake.pid), 10, interval_s=0.02, message="never exec'd")
        with pytest.raises(DbtesterError, match="already running"), pidfile(path):
            pass
        assert path.read_text().strip() == str(fake.pid)  # left alone
    finally:
        fake.kill()
        fake.wait()


def test_token_is_made_once_with_mode_600(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DBTESTER_AGENT_TOKEN", raising=False)
    token_file = tmp_path / "cfg" / "agent.token"
    monkeypatch.setenv("DBTESTER_AGENT_TOKEN_FILE", str(token_file))
    said: list[str] = []
    token = ensure_remote_token(said.append)
    assert len(token) == 64 and token not in said[0]
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert ensure_remote_token(said.append) == token == remote_token()
    assert len(said) == 1


def test_agent_refuses_a_token_file_others_can_read(tmp_path: Path) -> None:
    from dbtester.agent.config import read_token

    token = tmp_path / "agent.token"
    token.write_text("x" * 32)
    token.chmod(0o644)
    with pytest.raises(DbtesterError, match="readable by others") as caught:
        read_token(token)
    assert "x" * 32 not in str(caught.value)
    token.chmod(0o600)
    assert read_token(token) == "x" * 32


def _one_host() -> AgentHost:
    case = load_test_case_text(
        "title: t\nworkload: {type: write, requests: 10, clients: 1, connections: 1}\n"
        "databases:\n  - {id: a, kind: etcd, version: 3.5.17, hosts: [{address: 10.0.0.2}]}\n",
        "case.yaml",
    ).case
    (host,) = agent_hosts(case, "root")
    return host


def test_up_keeps_a_tls_section_written_by_hand() -> None:
    """The docs say to write an agent's tls: by hand; `agents up` must not
    replace it on its next run, and checks it as the agent will read it."""
    from dbtester.agent.config import AgentConfig
    from dbtester.remote.deploy import Layout, _agent_yaml, _kept_tls

    host = _one_host()
    layout = Layout(PurePosixPath("/opt/dbtester"))
    tls = {"cert": "/etc/dbtester/agent.crt", "key": "/etc/dbtester/agent.key"}
    written = _agent_yaml(host, layout, tls)
    ca = {"tls_ca": b"-----BEGIN CERTIFICATE-----"}
    kept = _kept_tls(written, host, ca)
    assert kept == tls
    again = yaml.safe_load(_agent_yaml(host, layout, kept))
    assert AgentConfig.model_validate(again).tls is not None
    assert _kept_tls(_agent_yaml(host, layout), host, ca) is None
    assert _kept_tls(None, host, {}) is None
    with pytest.raises(RemoteError, match=r"DBTESTER_AGENT_TLS_CA"):
        _kept_tls(written, host, {})
    with pytest.raises(RemoteError, match=r"tls: section is not valid \(key: Field required"):
        _kept_tls("tls: {cert: /a.crt}\n", host, ca)


def test_hosts_of_a_case_with_a_slow_disk_get_the_layer_too() -> None:
    from dbtester import slowdisk

    text = (
        "title: t\nworkload: {type: write, requests: 10, clients: 1, connections: 1}\n"
        "databases:\n  - {id: a, kind: etcd, version: 3.5.17, hosts: [{address: 10.0.0.2}]}\n"
    )
    (plain,) = agent_hosts(load_test_case_text(text, "case.yaml").case, "root")
    assert plain.installs == (("etcd", "3.5.17"),)
    slowed = text + "faults:\n  - {at: 1s, action: slow_disk, member: 0, fsync_ms: 5}\n"
    (host,) = agent_hosts(load_test_case_text(slowed, "case.yaml").case, "root")
    assert host.installs == (("etcd", "3.5.17"), (slowdisk.KIND, slowdisk.VERSION))
    assert slowdisk.VERSION.startswith("src-") and len(slowdisk.VERSION) == 16
