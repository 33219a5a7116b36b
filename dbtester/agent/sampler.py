"""Sample a database process once a second into a CSV, one row per tick.

Each row is appended and flushed at once, so a crash loses at most the current
second. Counters become per-tick deltas here, where the previous value is
known, and a delta is never negative: a counter that resets (process restart,
thread exit, device reset) or wraps counts from zero again.

Columns (``COLUMNS``), all integers except ``cpu_percent``:

=============================  =======================================================
unix_ms                        wall-clock time of the sample, milliseconds
pid                            the database's main PID (0 once it is gone)
cpu_percent                    CPU of the process and its children; 100 = one core
rss_bytes                      resident memory of the process and its children (a
                               companion's: their proportional set size, see Sampler)
threads                        threads of the process and its children
voluntary_ctxt_switches        delta: summed over every thread (/proc/PID/task/*)
nonvoluntary_ctxt_switches     delta: summed over every thread
read_bytes                     delta: bytes the process tree read from storage
write_bytes                    delta: bytes the process tree wrote to storage
reads_completed                delta: the data disk's completed reads
sectors_read                   delta: the data disk's sectors read (512 bytes)
writes_completed               delta: the data disk's completed writes
sectors_written                delta: the data disk's sectors written (512 bytes)
receive_bytes                  delta: bytes received on the network interface
transmit_bytes                 delta: bytes transmitted on the network interface
data_dir_bytes                 disk space used by the data directory (allocated blocks)
probe_ns                       the host-speed probe: CPU ns of its fixed work (higher: slower)
steal_ms                       delta: the host's steal time, summed over its CPUs
db_bytes                       the database file's size, as the database reports it
db_in_use_bytes                the part of it holding live data (-1 for both: not said)
=============================  =======================================================

The last two only where the kind reports a size (``DatabaseKind.size_probe``).
"""

from __future__ import annotations

import csv
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import psutil

from dbtester.databases.base import SizeProbe
from dbtester.results.metrics import HOST_COLUMNS, SERVER_COLUMNS, STORAGE_COLUMNS
from dbtester.util.counters import Counters
from dbtester.util.speed import probe_ns, steal_ms

__all__ = ["COLUMNS", "Sampler", "data_disk", "dir_usage"]

log = logging.getLogger(__name__)

COLUMNS = (*SERVER_COLUMNS, *HOST_COLUMNS)
SECTOR = 512


def dir_usage(path: Path) -> int:
    """Bytes of disk allocated to everything under ``path`` (like ``du -s``)."""
    total = 0
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * SECTOR
                    except FileNotFoundError:
                        continue  # removed while we looked (compaction, WAL rotation)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
    return total


def data_disk(path: Path) -> str | None:
    """The block device (as psutil names it) holding ``path``, or None when it has
    none of its own (overlay, tmpfs): then the sum of all disks is sampled."""
    try:
        dev = path.stat().st_dev
    except OSError:
        return None
    sys_link = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    try:
        name = sys_link.resolve().name
    except OSError:
        return None
    return name if name in psutil.disk_io_counters(perdisk=True) else None


def _thread_switches(pid: int) -> Iterable[tuple[int, int, int]]:
    """(tid, voluntary, nonvoluntary) for every thread of ``pid``.

    /proc/PID/status counts only the main thread, which for Go and Java servers
    is a small part of the work, so we read every task."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        voluntary = nonvoluntary = 0
        try:
            text = (task / "status").read_text()
        except OSError:
            continue  # the thread exited
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                nonvoluntary = int(line.split()[1])
        yield int(task.name), voluntary, nonvoluntary


@dataclass
class Sampler:
    """Samples ``process`` (and its children) every ``interval`` seconds into ``csv_path``."""

    process: psutil.Process
    csv_path: Path
    data_dir: Path
    interface: str | None
    disk: str | None
    interval: float = 1.0
    clock: Callable[[], float] = time.time
    #: rss_bytes as proportional set size: a page shared by n processes
    #: counts 1/n to each (a server of forked processes sharing memory, as
    #: PostgreSQL's backends share its buffers, would count it n times)
    proportional: bool = False
    #: the database's size, read each sample (None: its kind reports none)
    sizes: SizeProbe | None = None
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _counters: Counters = field(default_factory=Counters)
    _known: dict[int, psutil.Process] = field(default_factory=dict)
    _gone: bool = False

    def start(self) -> None:
        self._known = {self.process.pid: self.process}
        self.process.cpu_percent(None)  # the first call only sets a baseline
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, final_sample: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if final_sample:
            with self.csv_path.open("a", newline="") as out:
                self._write(out)

    def _run(self) -> None:
        new_file = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
        with self.csv_path.open("a", newline="") as out:
            if new_file:
                csv.writer(out).writerow(self.columns)
                out.flush()
            self.sample_row()  # baselines for every delta
            start = time.monotonic()
            tick = 1
            # Fixed schedule on the monotonic clock: no drift over a long run.
            while not self._stop.wait(max(0.0, start + tick * self.interval - time.monotonic())):
                self._write(out)
                tick += 1

    @property
    def columns(self) -> tuple[str, ...]:
        return (*COLUMNS, *STORAGE_COLUMNS) if self.sizes is not None else COLUMNS

    def _write(self, out: TextIO) -> None:
        try:
            row = self.sample_row()
        except Exception:  # a sampler that dies silently would leave holes
            log.exception("sampling failed")
            return
        csv.writer(out).writerow(row)
        out.flush()
        self.samples += 1

    # ---------------------------------------------------------------- one sample

    def _tree(self) -> list[psutil.Process]:
        if self._gone:
            return []
        try:
            if not self.process.is_running():  # also false when the PID was reused
                raise psutil.NoSuchProcess(self.process.pid)
            children = self.process.children(recursive=True)
        except psutil.NoSuchProcess:
            self._gone = True
            return []
        tree = [self.process]
        for child in children:
            # Keep the first Process object per PID: cpu_percent needs its history.
            known = self._known.setdefault(child.pid, child)
            tree.append(known)
        return tree

    def sample_row(self) -> list[object]:
        now_ms = int(self.clock() * 1000)
        tree = self._tree()
        cpu = 0.0
        rss = threads = read_bytes = write_bytes = 0
        switches_v = switches_n = 0
        alive_keys: list[object] = []
        for proc in tree:
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += self._memory(proc)
                    threads += proc.num_threads()
                    io = proc.io_counters()
                read_bytes += self._counters.delta(("read", proc.pid), io.read_bytes)
                write_bytes += self._counters.delta(("write", proc.pid), io.write_bytes)
                alive_keys += [("read", proc.pid), ("write", proc.pid)]
                for tid, vol, nonvol in _thread_switches(proc.pid):
                    switches_v += self._counters.delta_new_from_zero(("v", tid), vol)
                    switches_n += self._counters.delta_new_from_zero(("n", tid), nonvol)
                    alive_keys += [("v", tid), ("n", tid)]
            except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError):
                continue
        disk = self._disk_deltas()
        net = self._net_deltas()
        steal = self._counters.delta("steal", steal_ms())
        alive_keys += ["reads", "sread", "writes", "swritten", "rx", "tx", "steal"]
        self._counters.forget_except(alive_keys)
        pid = self.process.pid if tree else 0
        return [
            now_ms, pid, round(cpu, 2), rss, threads, switches_v, switches_n, read_bytes,
            write_bytes, *disk, *net, dir_usage(self.data_dir), probe_ns(), steal,
            *self._sizes(bool(tree)),
        ]  # fmt: skip

    def _sizes(self, alive: bool) -> tuple[int, ...]:
        """STORAGE_COLUMNS' values (none without a probe; -1: not said).
        The probe waits at most a quarter of the interval: a paused member
        must not stretch the seconds between samples."""
        if self.sizes is None:
            return ()
        said = self.sizes(min(0.5, self.interval / 4)) if alive else None
        return said if said is not None else (-1, -1)

    def _memory(self, proc: psutil.Process) -> int:
        if self.proportional:
            return int(proc.memory_full_info().pss)  # /proc/PID/smaps_rollup
        return int(proc.memory_info().rss)

    def _disk_deltas(self) -> list[int]:
        if self.disk is not None:
            counters = psutil.disk_io_counters(perdisk=True).get(self.disk)
        else:
            counters = psutil.disk_io_counters(perdisk=False)
        if counters is None:
            return [0, 0, 0, 0]
        sectors_read = counters.read_bytes // SECTOR
        sectors_written = counters.write_bytes // SECTOR
        return [
            self._counters.delta("reads", counters.read_count),
            self._counters.delta("sread", sectors_read),
            self._counters.delta("writes", counters.write_count),
            self._counters.delta("swritten", sectors_written),
        ]

    def _net_deltas(self) -> list[int]:
        if self.interface is not None:
            counters = psutil.net_io_counters(pernic=True).get(self.interface)
        else:
            counters = psutil.net_io_counters(pernic=False)
        if counters is None:
            return [0, 0]
        return [
            self._counters.delta("rx", counters.bytes_recv),
            self._counters.delta("tx", counters.bytes_sent),
        ]
