"""``interleave: slices``: every database's cluster up at once, the measured
load alternating between them.

Each database runs in a thread of its own through the phases a trial runs
(start, seed, warm up, ... verify, stop), but its measured load comes in
slices: it waits for its turn, loads for ``slice_s`` (at the workload's
``rate``, or closed loop), and hands the turn back. The coordinator
(:class:`Slices`, in the run's own thread) starts the clusters one after
another, then gives each ready database one slice per round, in an order
drawn at random each round, until ``repeat`` rounds ran or ``repeat: auto``
decided. Slice k of a database is its trial k: its requests and record are
in ``<db-id>/trial-<k>/``, so the trials' analysis (the pairs of a round,
the intervals, the sequential verdicts) reads them as it reads trials.

Only one slice loads at a time. Threads wait on queues; a database whose
thread ends (it failed, or the run is interrupted) gets no more turns.
"""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Slices", "Turns"]

#: what a database's thread tells the coordinator
Event = Literal["ready", "done", "gone"]


@dataclass
class Turns:
    """One database's side of the hand-over: it says when it is ready and
    when each slice is done, and waits for the number of its next slice
    (None: no more)."""

    db_id: str
    events: queue.Queue[tuple[str, Event]]
    #: each slice's length
    slice_s: float = 5.0
    inbox: queue.Queue[int | None] = field(default_factory=queue.Queue)
    #: set by the coordinator on Ctrl-C: the slice loading stops at its next poll
    interrupted: threading.Event = field(default_factory=threading.Event)

    def ready(self) -> None:
        self.events.put((self.db_id, "ready"))

    def next_slice(self) -> int | None:
        return self.inbox.get()

    def done(self, more: bool = True) -> None:
        """The slice ended; ``more``: the database can take another (not
        once its ``requests`` are spent, or its load failed)."""
        self.events.put((self.db_id, "done" if more else "gone"))

    def gone(self) -> None:
        """The thread ends (called last, whatever happened)."""
        self.events.put((self.db_id, "gone"))

    def health(self) -> str:
        """For the slice's load: why to stop it now ("": go on)."""
        return "interrupted (Ctrl-C)" if self.interrupted.is_set() else ""


@dataclass
class Slices:
    """The coordinator: a thread per database running ``run(turns)``, the
    clusters set up one at a time, then rounds of slices."""

    ids: Sequence[str]
    run: Callable[[Turns], None]
    slice_s: float
    seed: int | None = None
    events: queue.Queue[tuple[str, Event]] = field(default_factory=queue.Queue)
    turns: dict[str, Turns] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)
    #: the databases that may still load, in the test case's order
    ready: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        #: the databases whose threads ended
        self._gone: set[str] = set()

    def start(self) -> None:
        """Each database's cluster up and its load ready, one after another
        (their set-ups would compete for the machine); a database that fails
        on the way is left out."""
        for db_id in self.ids:
            turns = Turns(db_id, self.events, self.slice_s)
            self.turns[db_id] = turns
            thread = threading.Thread(
                target=self._thread, args=(turns,), name=f"slices-{db_id}", daemon=True
            )
            self.threads.append(thread)
            thread.start()
            if self._wait(db_id) == "ready":
                self.ready.append(db_id)

    def order(self) -> list[str]:
        """The ready databases in a random order: the next round's."""
        order = list(self.ready)
        self._random.shuffle(order)
        return order

    def round(self, number: int, order: Sequence[str] | None = None) -> list[str]:
        """Slice ``number`` of every ready database, in ``order`` (default: a
        random one); the order it ran in."""
        order = list(order) if order is not None else self.order()
        for db_id in order:
            if db_id in self._gone:  # it ended meanwhile (Ctrl-C, a failure)
                continue
            self.turns[db_id].inbox.put(number)
            self._wait(db_id)
        return order

    def finish(self) -> None:
        """No more slices: every thread verifies, stops its cluster and ends."""
        for turns in self.turns.values():
            turns.inbox.put(None)
        for thread in self.threads:
            thread.join()

    def interrupt(self) -> None:
        """Ctrl-C: the slice loading stops, then every thread ends as above."""
        for turns in self.turns.values():
            turns.interrupted.set()
        self.finish()

    def _thread(self, turns: Turns) -> None:
        try:
            self.run(turns)
        finally:
            turns.gone()

    def _wait(self, db_id: str) -> Event:
        """The next event of ``db_id`` (ready, done or gone; gone at once if
        its thread ended before). Only the database asked has anything to
        say meanwhile, but a thread may end at any time: every "gone" is
        kept, and the database leaves the ready ones."""
        while db_id not in self._gone:
            who, what = self.events.get()
            if what == "gone":
                self._gone.add(who)
                if who in self.ready:
                    self.ready.remove(who)
            if who == db_id:
                return what
        return "gone"
