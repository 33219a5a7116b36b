"""The client side's own resource use, once a second: CPU and RSS of the
process that runs the load engine, and the network bytes of the interface that
reaches the database, on the same wall clock as the servers' samples.

Columns (``dbtester.results.CLIENT_COLUMNS``): unix_ms, cpu_percent (100 = one
core), rss_bytes, receive_bytes, transmit_bytes (deltas), requests_done, errors
(cumulative); then the host-speed probe's (``HOST_COLUMNS``: probe_ns,
steal_ms), as the agents' samplers write them.
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from dbtester.results import CLIENT_COLUMNS, HOST_COLUMNS
from dbtester.util.counters import Counters
from dbtester.util.net import local_interface
from dbtester.util.speed import probe_ns, steal_ms

__all__ = ["ClientSampler"]


class ClientSampler:
    def __init__(
        self,
        process: psutil.Process,
        path: Path,
        endpoints: Sequence[str],
        counts: Callable[[], tuple[int, int]] | None = None,
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.processes = [process]
        self.clock = clock  # unix seconds, as the row's unix_ms reports them
        self.path = path
        self.counts = counts  # (requests done, errors) so far
        self.interval = interval
        self.interface = local_interface(endpoints[0]) if endpoints else None
        self._counters = Counters()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="client-sampler", daemon=True)

    def start(self) -> None:
        for process in self.processes:
            try:
                process.cpu_percent(None)
            except psutil.NoSuchProcess:
                continue
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with self.path.open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow((*CLIENT_COLUMNS, *HOST_COLUMNS))
            self._row()  # baselines
            start = time.monotonic()
            tick = 1
            while not self._stop.wait(max(0.0, start + tick * self.interval - time.monotonic())):
                writer.writerow(self._row())
                out.flush()
                tick += 1
            writer.writerow(self._row())

    def _row(self) -> list[object]:
        cpu, rss = 0.0, 0
        for process in self.processes:
            try:
                cpu += process.cpu_percent(None)
                rss += process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if self.interface is not None:
            counters = psutil.net_io_counters(pernic=True).get(self.interface)
        else:
            counters = psutil.net_io_counters()
        rx = self._counters.delta("rx", counters.bytes_recv) if counters else 0
        tx = self._counters.delta("tx", counters.bytes_sent) if counters else 0
        done, errors = self.counts() if self.counts else (0, 0)
        steal = self._counters.delta("steal", steal_ms())
        return [
            int(self.clock() * 1000),
            round(cpu, 2),
            rss,
            rx,
            tx,
            done,
            errors,
            probe_ns(),
            steal,
        ]
