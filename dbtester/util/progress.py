"""The one progress display: status lines, bars and timers for long work (a
load, a download, a build, an upload).

On a terminal a bar is redrawn in place; elsewhere (CI logs, a file) a line is
written every few seconds instead, so logs show progress without a flood.
Library code never prints on its own: it is handed a :class:`Reporter` (or a
stream) by the command that runs it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

__all__ = ["EVERY_S", "Progress", "Reporter"]

#: between progress lines when the stream is not a terminal
EVERY_S = 5.0
WIDTH = 30


def _write(stream: TextIO, text: str) -> None:
    stream.write(text)
    stream.flush()


class Progress:
    """``label [#####     ] detail`` for work of a known ``total``.

    ``update`` takes how much is done and a function that describes it; the
    function gets the rate (units per second since the line was last drawn)
    and is only called when a line is drawn."""

    def __init__(
        self, stream: TextIO | None, total: float, label: str = "", every_s: float = EVERY_S
    ) -> None:
        self.stream = stream
        self.total = total
        self.label = f"{label} " if label else ""
        self.every_s = every_s
        self.tty = bool(stream is not None and stream.isatty())
        self.begin = time.monotonic()
        self._last = (self.begin, 0.0)
        self._printed = self.begin
        self._drawn = False

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.begin

    def update(self, done: float, describe: Callable[[float], str]) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        if not self.tty and now - self._printed < self.every_s:
            return
        then, before = self._last
        rate = (done - before) / max(now - then, 1e-9)
        self._last = (now, done)
        self._printed = now
        filled = int(WIDTH * min(done / self.total, 1.0)) if self.total > 0 else 0
        line = f"{self.label}[{'#' * filled}{' ' * (WIDTH - filled)}] {describe(rate)}"
        _write(self.stream, f"\r{line}" if self.tty else f"{line}\n")
        self._drawn = self.tty

    def finish(self, line: str) -> float:
        """Replace the bar with ``line``; returns the seconds since the start."""
        seconds = self.elapsed
        if self.stream is not None:
            _write(self.stream, f"\r{line}{' ' * 20}\n" if self.tty else f"{line}\n")
        self._drawn = False
        return seconds

    def abandon(self) -> None:
        """End a bar that will not finish, so the next message starts on a new line."""
        if self.stream is not None and self._drawn:
            _write(self.stream, "\n")
        self._drawn = False


class Reporter:
    """Status lines and progress for long steps, to ``stream`` (stderr by default)."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        self.stream: TextIO = stream or sys.stderr
        self.quiet = quiet
        self.interactive = self.stream.isatty()

    def say(self, message: str) -> None:
        if not self.quiet:
            _write(self.stream, f"{message}\n")

    def progress(self, total: float, label: str = "") -> Progress:
        """A bar on this reporter's stream (silent when quiet)."""
        return Progress(None if self.quiet else self.stream, total, label)

    @contextlib.contextmanager
    def bytes_bar(self, label: str, total: int | None) -> Iterator[Callable[[int], None]]:
        """A bar for a transfer of ``total`` bytes (unknown: None); the body calls
        the function it is given with each chunk's size."""
        self.say(f"{label} ...")
        bar = self.progress(total or 0, label)
        done = 0

        def advance(size: int) -> None:
            nonlocal done
            done += size
            shown = f"{total / 1e6:,.1f}" if total else "?"
            bar.update(done, lambda rate: f"{done / 1e6:,.1f}/{shown} MB  {rate / 1e6:,.1f} MB/s")

        try:
            yield advance
        except BaseException:
            bar.abandon()
            raise
        if bar.tty:
            bar.finish(f"{label}: {done / 1e6:,.1f} MB")

    @contextlib.contextmanager
    def timer(self, label: str) -> Iterator[None]:
        """Show ``label`` with elapsed seconds while the body runs (a line at the end
        when not on a terminal)."""
        self.say(f"{label} ...")
        stop = threading.Event()
        start = time.monotonic()

        def tick() -> None:
            while not stop.wait(1.0):
                _write(self.stream, f"\r  {time.monotonic() - start:5.0f} s")

        thread = threading.Thread(target=tick, daemon=True)
        if self.interactive and not self.quiet:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread.is_alive():
                thread.join()
                _write(self.stream, "\n")
            self.say(f"  done in {time.monotonic() - start:.0f} s")
