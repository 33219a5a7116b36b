"""The agent's own settings: where it listens, its token, its data root and
which database binaries it may run (beyond what ``dbtester install`` put in
its DBTESTER_HOME)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dbtester.config.faults import VERSION_PATTERN
from dbtester.config.source import load_yaml_file
from dbtester.errors import ConfigError, DbtesterError, Problem
from dbtester.util.paths import dbtester_home

__all__ = ["AgentConfig", "load_agent_config", "read_token"]


class TlsFiles(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cert: Path
    key: Path
    ca: Path | None = None  # set: clients must present a certificate it signed


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    listen: str = "127.0.0.1:3500"
    token_file: Path | None = None
    data_root: Path = Field(default_factory=lambda: dbtester_home() / "agent")
    heartbeat_timeout_s: float = Field(60.0, gt=0)
    sample_interval_s: float = Field(1.0, gt=0, le=60)
    stop_grace_s: float = Field(10.0, ge=0)
    tls: TlsFiles | None = None
    #: the hosts a Load call may send load to (`agents up` writes the test
    #: case's databases here; an empty list refuses every Load); None: any
    load_targets: tuple[str, ...] | None = None
    #: kind -> version -> entry roles (as an install manifest has them)
    binaries: dict[str, dict[Annotated[str, Field(pattern=VERSION_PATTERN)], dict[str, str]]] = (
        Field(default_factory=dict)
    )


def load_agent_config(path: Path | None, **overrides: object) -> AgentConfig:
    raw: dict[str, object] = {}
    if path is not None:
        doc = load_yaml_file(path)
        if not isinstance(doc.data, dict):
            raise ConfigError([doc.problem((), "expected a mapping of keys")])
        raw = doc.data
    raw.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return AgentConfig.model_validate(raw)
    except ValidationError as exc:
        where = str(path) if path else "agent options"
        raise ConfigError(
            [
                Problem(where, 0, 0, f"{'.'.join(map(str, e['loc']))}: {e['msg']}")
                for e in exc.errors()
            ]
        ) from None


def read_token(path: Path) -> str:
    """The bearer token in ``path``; the file must not be readable by others."""
    try:
        mode = path.stat().st_mode
        token = path.read_text().strip()
    except OSError as exc:
        raise DbtesterError(f"cannot read token file {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise DbtesterError(
            f"token file {path} is readable by others (mode {oct(mode & 0o777)}); chmod 600 it"
        )
    if len(token) < 16:
        raise DbtesterError(f"token file {path} holds fewer than 16 characters")
    return token
