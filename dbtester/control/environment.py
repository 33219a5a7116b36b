"""The environment a run measured: machine, software versions, and how fast the
data disk makes a write durable (an fsync probe), kept in the run summary."""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from dbtester import __version__
from dbtester.results import Environment
from dbtester.util.host import host_facts

__all__ = ["environment", "fsync_probe_ms"]


def _package(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def fsync_probe_ms(directory: Path, writes: int = 50) -> float:
    """Median milliseconds to write 4 KiB and fsync it, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    block = os.urandom(4096)
    times = []
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".fsync-probe-") as handle:
        for _ in range(writes):
            start = time.perf_counter()
            handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())
            times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 3)


def environment(data_dir: Path) -> Environment:
    host = host_facts()
    return Environment(
        hostname=host.hostname,
        kernel=host.kernel,
        cpu_model=host.cpu_model,
        cores=host.cores,
        memory_gib=host.memory_gib,
        python=platform.python_version(),
        dbtester=__version__,
        grpcio=_package("grpcio"),
        fsync_ms_median=fsync_probe_ms(data_dir),
        fsync_probe_dir=str(data_dir),
    )
