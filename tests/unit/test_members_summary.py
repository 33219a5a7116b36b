"""``agents status`` counts each host's members by state, and tells an
isolated member (it runs, but is cut off) from one that merely runs."""

from __future__ import annotations

from dbtester.proto import agent_pb2 as pb
from dbtester.remote.deploy import members_summary


def _member(state: str, isolated: bool = False) -> pb.MemberStatus:
    return pb.MemberStatus(state=state, isolated=isolated)


def test_members_are_counted_by_state() -> None:
    members = [_member("running"), _member("killed"), _member("running")]
    assert members_summary(members) == "1 killed, 2 running"


def test_an_isolated_member_is_told_apart() -> None:
    members = [_member("running"), _member("running", isolated=True), _member("running")]
    assert members_summary(members) == "2 running, 1 running (isolated)"


def test_no_members() -> None:
    assert members_summary([]) == "none"
