"""Server machines over SSH: ``dbtester agents up|down|status``."""

from dbtester.errors import RemoteError
from dbtester.remote.deploy import (
    AgentHost,
    HostStatus,
    agent_hosts,
    agents_down,
    agents_status,
    agents_up,
    local_installs,
)
from dbtester.remote.ssh import SshOptions, SshSession, SshTarget
from dbtester.remote.wheels import Wheelhouse, build_wheelhouse

__all__ = [
    "AgentHost",
    "HostStatus",
    "RemoteError",
    "SshOptions",
    "SshSession",
    "SshTarget",
    "Wheelhouse",
    "agent_hosts",
    "agents_down",
    "agents_status",
    "agents_up",
    "build_wheelhouse",
    "local_installs",
]
