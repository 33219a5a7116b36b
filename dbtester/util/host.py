"""The facts about a machine that decide whether figures measured on it can be
compared with figures measured on another: its CPU model, cores, memory and
kernel. The controller records its own (``result.json``) and every agent its
host's (each member in ``run.json``)."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = ["HostFacts", "host_facts"]


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    kernel: str
    cpu_model: str
    cores: int | None
    memory_gib: float


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def host_facts() -> HostFacts:
    """This machine's facts, as read now."""
    return HostFacts(
        hostname=platform.node(),
        kernel=f"{platform.system()} {platform.release()}",
        cpu_model=_cpu_model(),
        cores=os.cpu_count(),
        memory_gib=round(psutil.virtual_memory().total / 2**30, 1),
    )
