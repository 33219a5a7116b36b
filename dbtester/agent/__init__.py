"""The agent: a gRPC service that runs database members on its machine,
samples them once a second and hands their files back."""

from dbtester.agent.config import AgentConfig, load_agent_config
from dbtester.agent.server import AgentServer, serve

__all__ = ["AgentConfig", "AgentServer", "load_agent_config", "serve"]
