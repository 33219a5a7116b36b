"""The sampler: never-negative deltas, threads summed, real processes sampled."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from dbtester.agent.auth import is_loopback_peer
from dbtester.agent.sampler import COLUMNS, Sampler, _thread_switches, dir_usage
from dbtester.results import STORAGE_COLUMNS
from dbtester.util.counters import Counters
from tests.support.poll import poll_until


def test_counter_deltas_never_go_negative() -> None:
    c = Counters()
    assert c.delta("x", 100) == 0  # baseline
    assert c.delta("x", 150) == 50
    assert c.delta("x", 10) == 10  # reset: counts from zero again
    assert c.delta("x", 2**32 - 1) == 2**32 - 11
    assert c.delta("x", 5) == 5  # a 32-bit wrap never yields a negative delta


def test_new_threads_count_in_full_and_gone_ones_are_forgotten() -> None:
    c = Counters()
    assert c.delta_new_from_zero(("v", 1), 40) == 40
    assert c.delta_new_from_zero(("v", 1), 45) == 5
    c.forget_except([])
    assert c.delta_new_from_zero(("v", 1), 3) == 3  # a reused tid starts over


def test_context_switches_are_summed_over_threads() -> None:
    code = (
        "import threading, time\n"
        "def spin():\n"
        "    while True: time.sleep(0.001)\n"
        "ts = [threading.Thread(target=spin, daemon=True) for _ in range(4)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])

    def counted() -> int:
        """How many threads were summed, once all five (the main thread and
        the 4) are there and they switched more than the main thread alone
        (which hides most of it); 0 before. The threads start one after
        another: a CI run saw 3 summed before the last two had started."""
        threads = list(_thread_switches(proc.pid))
        main_only = psutil.Process(proc.pid).num_ctx_switches().voluntary
        total = sum(v for _, v, _ in threads)
        return len(threads) if len(threads) >= 5 and total > main_only * 2 else 0

    try:
        # until the 4 threads have started and switched (no timing relied
        # on: they run until killed); fails if their switches are not summed
        threads = poll_until(counted, 30, message="the threads' switches not summed")
    finally:
        proc.kill()
        proc.wait()
    assert threads == 5


def test_sampler_writes_a_row_per_tick_for_a_busy_process(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "x = 0\nwhile True: x += 1"]  # spins until killed
    )
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_bytes(b"x" * 10000)
    sampler = Sampler(
        psutil.Process(proc.pid), tmp_path / "m.csv", data, interface="lo", disk=None, interval=0.5
    )
    try:
        sampler.start()
        poll_until(lambda: sampler.samples >= 4, 30, message="fewer than 4 samples")
        sampler.stop()
    finally:
        proc.kill()
        proc.wait()
    rows = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert tuple(rows[0]) == COLUMNS
    assert len(rows) >= 4  # ticks (as many as the poll waited for) and the stop's row
    assert all(int(r["pid"]) == proc.pid for r in rows)
    # a spinning process: some CPU, whatever share a busy machine leaves it
    assert max(float(r["cpu_percent"]) for r in rows) > 0
    assert all(int(r["rss_bytes"]) > 0 for r in rows)
    assert all(int(r["data_dir_bytes"]) >= 10000 for r in rows)
    assert sampler.samples == len(rows)


def test_sampler_survives_the_process_vanishing(tmp_path: Path) -> None:
    # lives until its stdin closes: once it has been sampled, not after a
    # guessed time a busy machine may not give the sampler
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    sampler = Sampler(
        psutil.Process(proc.pid),
        tmp_path / "m.csv",
        tmp_path,
        interface=None,
        disk=None,
        interval=0.3,
    )
    sampler.start()

    def last_pid() -> str:
        text = (tmp_path / "m.csv").read_text().splitlines() if sampler.samples else []
        return text[-1].split(",")[COLUMNS.index("pid")] if len(text) > 1 else ""

    poll_until(lambda: last_pid() == str(proc.pid), 30, message="no row of the running process")
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait()
    poll_until(lambda: last_pid() == "0", 30, message="no row after the process ended")
    sampler.stop()
    rows = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert rows[0]["pid"] == str(proc.pid)
    assert rows[-1]["pid"] == "0" and rows[-1]["rss_bytes"] == "0"  # gone: zeros, no crash


def test_dir_usage_counts_allocated_blocks(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").write_bytes(b"x" * 8192)
    assert dir_usage(tmp_path) >= 8192
    assert dir_usage(tmp_path / "missing") == 0


@pytest.mark.parametrize(
    ("peer", "loopback"),
    [
        ("ipv4:127.0.0.1:5000", True),
        ("ipv4:127.3.2.1:5000", True),
        ("ipv6:[::1]:5000", True),
        ("ipv6:[::ffff:127.0.0.1]:5000", True),
        ("ipv6:%5B::1%5D:5000", True),
        ("ipv4:10.0.0.2:5000", False),
        ("ipv6:[fe80::1]:5000", False),
        ("ipv4:128.0.0.1:1", False),
    ],
)
def test_loopback_peers(peer: str, loopback: bool) -> None:
    assert is_loopback_peer(peer) is loopback


def test_a_kind_that_reports_its_size_gets_two_more_columns(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    said = iter([(4096, 1024), None])  # then the member stops answering (paused)
    timeouts: list[float] = []

    def sizes(timeout: float) -> tuple[int, int] | None:
        timeouts.append(timeout)
        return next(said, None)

    sampler = Sampler(
        psutil.Process(proc.pid), tmp_path / "m.csv", tmp_path, None, None, 0.4, sizes=sizes
    )
    try:
        first, second = sampler.sample_row(), sampler.sample_row()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    assert sampler.columns == (*COLUMNS, *STORAGE_COLUMNS)
    assert first[-2:] == [4096, 1024] and second[-2:] == [-1, -1]
    assert len(first) == len(sampler.columns)
    assert timeouts == [0.1, 0.1]  # a quarter of the interval: a silent member costs little
    without = Sampler(psutil.Process(), tmp_path / "n.csv", tmp_path, None, None)
    assert without.columns == COLUMNS and len(without.sample_row()) == len(COLUMNS)
