"""The agent's Status reads each member's state while a fault may hold it
(an upgrade stops and starts the member for seconds): it must answer, or
the controller's heartbeat, which waits 1 s a beat, counts the agent
silent and fails the run (it did, on a busy machine: a 3.7-s upgrade)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from dbtester.agent.member import Member
from dbtester.databases.base import DatabaseKind, MemberSpec, Peer
from dbtester.install import Installed


def test_the_state_is_told_while_a_fault_holds_the_member(tmp_path: Path) -> None:
    spec = MemberSpec(
        index=0,
        peers=(Peer("m0", "127.0.0.1", {"client": 1}),),
        flags=cast("dict[str, object]", {}),  # type: ignore[arg-type]
        member_dir=tmp_path / "member-0",
        data_dir=tmp_path / "member-0" / "data",
        cluster_token="t",
    )
    member = Member(
        cast(DatabaseKind, SimpleNamespace(name="etcd")),
        cast(Installed, None),
        spec,
        sample_interval=1.0,
        failure_root=tmp_path / "failed",
    )
    member.state = "starting"  # as an upgrade's relaunch leaves it
    held = threading.Event()
    release = threading.Event()

    def fault() -> None:
        with member._lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=fault)
    holder.start()
    try:
        assert held.wait(5)
        begin = time.monotonic()
        state = member.poll()
        # Precision: the lock is held for up to 10 s; an answer within the
        # heartbeat's 1 s is what matters.
        assert time.monotonic() - begin < 1.0
        assert state == "starting"
    finally:
        release.set()
        holder.join()
    assert member.poll() == "starting"  # with the lock free, as before
