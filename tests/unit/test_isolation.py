"""The agent's isolation of its host (agent/isolation.py) against a stand-in
``nft`` on PATH: what it asks nft, what it keeps open, and what a missing or
failing nft says. The real firewall is in tests/integration/test_multihost.py."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from dbtester.agent.isolation import Isolation, sweep
from dbtester.agent.member import Member
from dbtester.databases import KINDS
from dbtester.databases.base import MemberSpec, Peer
from dbtester.errors import MemberError
from dbtester.install import Installed

FAKE_NFT = """\
#!/bin/sh
echo "$*" >> {log}
if [ "$1" = "-f" ]; then cat >> {log}; fi
if [ "$1" = "list" ]; then printf '%s\\n' {tables}; fi
exit {code}
"""


def _fake_nft(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, code: int = 0, tables: str = "''"
) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "nft.log"
    script = bin_dir / "nft"
    script.write_text(FAKE_NFT.format(log=log, code=code, tables=tables))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return log


def test_apply_adds_one_table_that_keeps_loopback_the_agent_and_ssh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake_nft(tmp_path, monkeypatch)
    cut = Isolation("/data/runs/r/db/member-1", 3500)
    assert cut.table.startswith("dbtester_isolate_3500_")
    cut.apply()
    cut.apply()  # once is enough
    said = log.read_text()
    assert said.count(f"table inet {cut.table} {{") == 1
    assert 'iifname "lo" accept' in said and 'oifname "lo" accept' in said
    assert "tcp dport { 22, 3500 } accept" in said and "tcp sport { 22, 3500 } accept" in said
    assert said.count("drop") == 2
    cut.remove()
    cut.remove()
    assert log.read_text().count(f"delete table inet {cut.table}") == 1
    # another member's isolation is another table
    assert Isolation("/data/runs/r/db/member-2", 3500).table != cut.table


def test_a_missing_nft_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda *_a, **_k: None)
    with pytest.raises(MemberError, match=r"apt-get install nftables\) and root or CAP_NET_ADMIN"):
        Isolation("k", 3500).apply()
    assert sweep(3500) == []  # nothing could have been made: quiet


def test_a_refusing_nft_is_quoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nft(tmp_path, monkeypatch, code=1)
    cut = Isolation("k", 3500)
    with pytest.raises(MemberError, match=r"nft -f - failed: exit code 1 \(isolate needs root"):
        cut.apply()
    assert not cut.active


def test_sweep_removes_only_this_ports_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables = "'table inet dbtester_isolate_3500_abc' 'table inet dbtester_isolate_35001_abc'"
    tables += " 'table inet filter'"
    log = _fake_nft(tmp_path, monkeypatch, tables=tables)
    assert sweep(3500) == ["dbtester_isolate_3500_abc"]
    assert log.read_text().splitlines()[1:] == ["delete table inet dbtester_isolate_3500_abc"]


def test_a_member_keeps_its_isolation_until_healed_or_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Isolate refuses twice and heal refuses without it; a member's stop
    deletes a table no heal did (no rule outlives the run). The process state
    is left alone: an isolated member still reads as running, not dead."""
    log = _fake_nft(tmp_path, monkeypatch)
    kind = KINDS["etcd"]
    spec = MemberSpec(
        index=0,
        peers=(Peer("m0", "10.0.0.1", dict(kind.default_ports)),),
        flags=kind.flags_model(),
        member_dir=tmp_path / "member-0",
        data_dir=tmp_path / "member-0" / "data",
        cluster_token="t",
    )
    installed = Installed("etcd", "3.5.17", tmp_path, "test", {}, "")
    member = Member(kind, installed, spec, sample_interval=1.0, failure_root=tmp_path / "failed")
    with pytest.raises(MemberError, match="cannot isolate etcd member 0: it is new"):
        member.isolate(3500)
    member.process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    member.state = "running"
    try:
        # on loopback it would cut the machine off, not the member
        on_loopback = Peer("m0", "127.0.0.1", dict(kind.default_ports))
        member.spec = replace(spec, peers=(on_loopback,))
        with pytest.raises(MemberError, match=r"it listens on loopback \(127.0.0.1\)"):
            member.isolate(3500)
        member.spec = spec
        with pytest.raises(MemberError, match="cannot heal etcd member 0: it is not isolated"):
            member.heal()
        member.isolate(3500)
        with pytest.raises(MemberError, match="it is isolated already"):
            member.isolate(3500)
        assert member.isolated and member.poll() == "running"
        member.stop(failed=False, grace=5.0)
    finally:
        if member.process.poll() is None:
            member.process.kill()
        member.process.wait()
    assert not member.isolated
    asked = [line for line in log.read_text().splitlines() if line.startswith(("-f", "delete"))]
    table = Isolation(str(tmp_path / "member-0"), 3500).table  # the member's own
    assert asked == ["-f -", f"delete table inet {table}"]
