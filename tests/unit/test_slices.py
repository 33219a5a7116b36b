"""interleave: slices' coordinator as pure logic: databases set up one at a
time, one slice at a time in a random order each round, a database that
fails or runs out of requests left out, every thread ended."""

from __future__ import annotations

import threading
from collections.abc import Callable

from dbtester.control.slices import Slices, Turns


def _loader(
    log: list[tuple[str, int]], lock: threading.Lock, fails: dict[str, int]
) -> Callable[[Turns], None]:
    """A database's thread: ready, then each slice logged, until told to end
    (or its failing slice: it ends without saying done)."""

    def run(turns: Turns) -> None:
        if fails.get(turns.db_id) == 0:
            return  # its cluster never came up
        turns.ready()
        while (number := turns.next_slice()) is not None:
            with lock:
                log.append((turns.db_id, number))
            if fails.get(turns.db_id) == number:
                return
            turns.done(more=number < 4 or turns.db_id != "c")

    return run


def test_every_round_gives_each_database_one_slice_in_a_random_order() -> None:
    log: list[tuple[str, int]] = []
    slices = Slices(["a", "b", "c"], _loader(log, threading.Lock(), {}), 5.0, seed=3)
    slices.start()
    orders = [slices.round(n) for n in range(1, 7)]
    slices.finish()
    assert all(not t.is_alive() for t in slices.threads)
    # c spent its requests in its 4th slice: rounds 5 and 6 are a's and b's
    assert [sorted(o) for o in orders] == [["a", "b", "c"]] * 4 + [["a", "b"]] * 2
    assert len({tuple(o) for o in orders[:4]}) > 1  # the order is drawn each round
    assert log == [(db, n) for n, order in enumerate(orders, 1) for db in order]  # one at a time


def test_a_database_that_fails_is_left_out_and_the_others_go_on() -> None:
    log: list[tuple[str, int]] = []
    fails = {"a": 0, "b": 2}  # a never comes up; b's second slice fails
    slices = Slices(["a", "b", "c"], _loader(log, threading.Lock(), fails), 5.0, seed=1)
    slices.start()
    assert slices.ready == ["b", "c"]
    orders = [slices.round(n) for n in range(1, 4)]
    slices.finish()
    assert sorted(orders[1]) == ["b", "c"] and orders[2] == ["c"]
    assert ("b", 3) not in log and ("c", 3) in log


def test_an_interrupt_stops_the_slice_loading_and_ends_every_thread() -> None:
    started, seen = threading.Event(), []

    def run(turns: Turns) -> None:
        turns.ready()
        while turns.next_slice() is not None:
            started.set()
            turns.interrupted.wait(30)  # a slice's load polls its health
            seen.append(turns.health())
            turns.done(more=False)

    slices = Slices(["a", "b"], run, 5.0)
    slices.start()
    ran = threading.Thread(target=slices.round, args=(1,), daemon=True)
    ran.start()
    assert started.wait(30)
    slices.interrupt()
    ran.join(30)
    assert seen[0] == "interrupted (Ctrl-C)"
    assert all(not t.is_alive() for t in slices.threads)
    # the round gave up on the database that ended before its turn came
    assert not ran.is_alive()
