"""What each scheduled fault did to the load: the figures of one trial's
fault windows, from its per-request records. Pure.

A *window* is one fault that takes a member out (kill, pause, isolate) with
the one that brings it back (restart, resume, heal), or one maintenance event
(compact, defrag, snapshot, transfer_leader) from its start to its end, on
the load's clock (seconds since it started). Every time is a completion
time: a request in open loop may be due long before it is sent, and a
failure counts when its reply (or timeout) came, which is when the client
saw the trouble.

Per window:

- **unavailability**: the longest stretch with no successful completion,
  counting from the last success before the fault, until the next window or
  the end of the load;
- **recovery**: seconds from the fault until the end of the first whole
  second of successful completions back at 90% of the median second before
  the fault, after first falling below it (0 when it never fell; None when it
  did not come back within the load). The end, not the start: an open-loop
  load catches up in a burst after a stall, and a second that holds the burst
  can reach 90% while most of it served nothing;
- **errors**, by kind: failures completed from the fault to the next window
  or the end of the load;
- **p99** of successful requests completed in the 10 s before the fault,
  while the member was out, and in the 10 s after it came back, and the
  **slowest** one from the fault to 10 s after it came back (a request held
  by a paused member waits for all of the pause, and is rarely in a p99);
- the seconds until another member was named leader (from run.json);
- for a watch load, the watch events of puts *sent* from the fault to the
  next window or the end that some watcher never received (summed over the
  watchers), the duplicate events that *arrived* in that span, and the p99
  watch latency of the puts sent from the fault to 10 s after it was undone;
- for a lock load, the locks held when the fault struck (by a hold that
  began before it and had not begun its release; an ``expire_session``: its
  one lock) and the **lock recovery**: seconds from the fault until each of
  them had been acquired by a new holder (None: one was not within the
  load). A crashed holder's lock passes on only when its session expires, so
  beside the session TTL it shows what the expiry cost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dbtester.results import (
    FaultRecord,
    FaultSummary,
    FigureValue,
    LockHolds,
    Records,
    WatchEvents,
)

__all__ = [
    "FAULT_ROWS",
    "NOT_RECOVERED",
    "RECOVERED_SHARE",
    "SIDE_S",
    "Window",
    "fault_figures",
    "fault_row",
    "fault_values",
    "lock_fault_figures",
    "scheduled",
    "watch_fault_figures",
    "windows",
]

#: throughput counts as back at this share of its median before the fault
RECOVERED_SHARE = 0.9
#: p99 before and after a fault is taken over this many seconds
SIDE_S = 10.0
#: recovery is looked for in 1-s windows that start this often
_STEP_S = 0.1

#: FAULT-<k>-RECOVERY-SECONDS of a fault the load did not recover from
NOT_RECOVERED = "not within the load"

#: per window k, table rows FAULT-<k>-<suffix> in table order, and each one's value
_ROWS: dict[str, Callable[[FaultSummary], FigureValue]] = {
    "": lambda f: f.description,  # FAULT-<k>: what happened, in words
    "NEW-LEADER-SECONDS": lambda f: f.new_leader_s,
    "UNAVAILABLE-SECONDS": lambda f: f.unavailable_s,
    "RECOVERY-SECONDS": lambda f: f.recovery_s if f.recovered else NOT_RECOVERED,
    "ERRORS": lambda f: sum(f.errors.values()),
    "P99-BEFORE-MS": lambda f: f.p99_before_ms,
    "P99-DURING-MS": lambda f: f.p99_during_ms,
    "P99-AFTER-MS": lambda f: f.p99_after_ms,
    "SLOWEST-MS": lambda f: f.slowest_ms,
}
#: per window k of a watch load, after those
_WATCH_ROWS: dict[str, Callable[[FaultSummary], FigureValue]] = {
    "WATCH-MISSED": lambda f: f.watch_missed,
    "WATCH-DUPLICATED": lambda f: f.watch_duplicated,
    "WATCH-P99-MS": lambda f: f.watch_p99_ms,
}
#: per window k of a maintenance event, after those
_EVENT_ROWS: dict[str, Callable[[FaultSummary], FigureValue]] = {
    "TOOK-SECONDS": lambda f: f.took_s,
}
#: per window k of a lock load, after those
_LOCK_ROWS: dict[str, Callable[[FaultSummary], FigureValue]] = {
    "LOCKS-HELD": lambda f: f.locks_held,
    "LOCK-RECOVERY-SECONDS": lambda f: (
        f.lock_recovery_s if f.lock_recovery_s is not None or not f.locks_held else NOT_RECOVERED
    ),
}
FAULT_ROWS = (*_ROWS, *_EVENT_ROWS, *_WATCH_ROWS, *_LOCK_ROWS)


def fault_row(number: int, suffix: str) -> str:
    """The table row of window ``number`` (from 1) for ``suffix`` (FAULT_ROWS)."""
    return f"FAULT-{number}-{suffix}" if suffix else f"FAULT-{number}"


def fault_values(f: FaultSummary) -> dict[str, FigureValue]:
    """The table rows of window ``f`` and their values, in table order (the
    watch rows for a watch load's windows only, how long it took for a
    maintenance event's only)."""
    rows = _ROWS if f.took_s is None else _ROWS | _EVENT_ROWS
    rows = rows if f.watch_missed is None else rows | _WATCH_ROWS
    rows = rows if f.locks_held is None else rows | _LOCK_ROWS
    return {fault_row(f.number, suffix): value(f) for suffix, value in rows.items()}


@dataclass(frozen=True)
class Window:
    """A member out of the cluster: from its fault to the one that undid it."""

    number: int  # from 1, in schedule order
    fault: FaultRecord
    start_s: float  # on the load's clock
    end_s: float | None  # when it was undone; None: not within the load
    undo: FaultRecord | None

    @property
    def event(self) -> bool:
        """A maintenance event: it ended by itself."""
        return self.fault.end_unix is not None

    def describe(self) -> str:
        """As scheduled, e.g. ``kill leader at 10 s, restart at 20 s``: the same
        for every database and trial (the member hit and the moments it took
        effect are in the record)."""
        text = scheduled(self.fault)
        if self.undo is not None:
            text += f", {self.undo.action} at {self.undo.at_s:g} s"
        return text


def scheduled(f: FaultRecord) -> str:
    """A fault as the test case scheduled it, e.g. ``kill leader at 10 s``."""
    who = f"member {f.target}" if f.target.isdigit() else f.target
    if f.action == "transfer_leader":
        who = f"to {who}"
    peers = " from its peers" if f.keep_clients else ""
    to = f" to {f.to}" if f.to else ""
    to += f" by {f.fsync_ms:g} ms" if f.fsync_ms else ""
    to += f" of lock {f.lock}'s holder" if f.lock is not None else ""
    head = f"{f.action} {who}" if who else f.action
    return f"{head}{peers}{to}".rstrip() + f" at {f.at_s:g} s"


def windows(faults: Sequence[FaultRecord], load_start: float) -> list[Window]:
    """The trial's fault windows, in order; faults that were not applied (an
    error, no time) are left out."""
    found: list[Window] = []
    out: list[int] = []  # indices into found still out, latest last
    for record in faults:
        if record.error or record.unix is None:
            continue
        t = record.unix - load_start
        if record.end_unix is not None:  # a maintenance event: it ends by itself
            end = record.end_unix - load_start
            found.append(Window(len(found) + 1, record, t, end, None))
        elif record.target:  # one that takes a member out (an undo names none)
            found.append(Window(len(found) + 1, record, t, None, None))
            out.append(len(found) - 1)
        elif out:
            i = out.pop()
            found[i] = Window(found[i].number, found[i].fault, found[i].start_s, t, record)
    return found


@dataclass(frozen=True)
class _Timeline:
    """One trial's requests on the load's clock, successes sorted by completion."""

    ok_s: npt.NDArray[np.float64]  # successes' completion times, sorted
    ok_ms: npt.NDArray[np.float64]  # their latencies, in the same order
    failed_s: npt.NDArray[np.float64]  # failures' completion times
    failed_sent_s: npt.NDArray[np.float64]  # and when they were sent
    failed_kind: list[str]
    last_sent_s: float  # after this no request was offered
    last_done_s: float

    @classmethod
    def of(cls, records: Records, load_start: float) -> _Timeline:
        origin = load_start * 1e9
        done = (records.due_ns + records.latency_ns - origin) / 1e9
        sent = (records.sent_ns() - origin) / 1e9
        ok = records.code == 0
        order = np.argsort(done[ok], kind="stable")
        failed = ~ok
        return cls(
            ok_s=done[ok][order],
            ok_ms=(records.latency_ns[ok] / 1e6)[order],
            failed_s=done[failed],
            failed_sent_s=sent[failed],
            failed_kind=[records.codes[c] for c in records.code[failed]],
            last_sent_s=float(sent.max()),
            last_done_s=float(done.max()),
        )

    def successes(self, begin: float, end: float) -> npt.NDArray[np.float64]:
        """Latencies (ms) of successes completed in [begin, end)."""
        lo, hi = np.searchsorted(self.ok_s, [begin, end])
        return self.ok_ms[lo:hi]

    def per_second(self, begin: float, end: float) -> npt.NDArray[np.int64]:
        """Successes in each whole second [begin + i, begin + i + 1) before ``end``."""
        edges = begin + np.arange(0, max(0, int(end - begin)) + 1, dtype=float)
        counts = np.diff(np.searchsorted(self.ok_s, edges))
        return counts.astype(np.int64)

    def longest_gap(self, start: float, horizon: float) -> tuple[float, float]:
        """(from, to) of the longest stretch without a success, among those
        from the last success before ``start`` (or ``start``) until ``horizon``.
        A stretch still open then ends at the last failure sent in it: after
        the load stopped offering requests, nothing could have succeeded."""
        first = int(np.searchsorted(self.ok_s, start, side="right")) - 1
        last = int(np.searchsorted(self.ok_s, horizon, side="left"))
        times = self.ok_s[max(first, 0) : last]
        if first < 0:
            times = np.concatenate(([start], times))
        open_since = float(times[-1])
        tried = (self.failed_sent_s >= open_since) & (self.failed_s < horizon)
        if tried.any():
            times = np.concatenate((times, [float(self.failed_s[tried].max())]))
        if len(times) < 2:
            return open_since, open_since
        gaps = np.diff(times)
        at = int(np.argmax(gaps))
        return float(times[at]), float(times[at + 1])


def fault_figures(
    records: Records | None, faults: Sequence[FaultRecord], load_start: float
) -> list[FaultSummary]:
    """The figures of every fault window of one trial (see the module's doc)."""
    found = windows(faults, load_start)
    if records is None or len(records) == 0 or not found:
        return []
    timeline = _Timeline.of(records, load_start)
    summaries = []
    for i, window in enumerate(found):
        # until the next window, or past the load's last completion (inclusive)
        horizon = found[i + 1].start_s if i + 1 < len(found) else timeline.last_done_s + 1e-9
        since = 0.0
        if i:  # throughput before this window: since the last one ended
            previous = found[i - 1]
            since = previous.start_s if previous.end_s is None else previous.end_s
        summaries.append(_summary(window, timeline, since, horizon))
    return summaries


def watch_fault_figures(
    summaries: Sequence[FaultSummary], watch: WatchEvents, load_start: float
) -> list[FaultSummary]:
    """``summaries`` with what each window did to the watchers."""
    if not summaries:
        return []  # spares a per-event copy of 10^7 send times
    sent_s = watch.sent_unix_s() - load_start  # NaN (never sent) is in no span
    missing = watch.missing()
    duplicate_s = watch.duplicate_unix_s() - load_start
    event_sent_s = sent_s[watch.key] if len(watch) else np.zeros(0)
    found = []
    for i, f in enumerate(summaries):
        horizon = summaries[i + 1].start_s if i + 1 < len(summaries) else np.inf
        after_end = horizon if f.end_s is None else min(f.end_s + SIDE_S, horizon)
        put_in = (sent_s >= f.start_s) & (sent_s < horizon)
        events_in = (event_sent_s >= f.start_s) & (event_sent_s < after_end)
        latencies = watch.latency_us[events_in] / 1e3
        found.append(
            f.model_copy(
                update={
                    "watch_missed": int(missing[put_in].sum()),
                    "watch_duplicated": int(
                        ((duplicate_s >= f.start_s) & (duplicate_s < horizon)).sum()
                    ),
                    "watch_p99_ms": float(np.percentile(latencies, 99)) if len(latencies) else None,
                }
            )
        )
    return found


def lock_fault_figures(
    summaries: Sequence[FaultSummary], holds: LockHolds, load_start: float
) -> list[FaultSummary]:
    """``summaries`` with the locks each window found held, and how long
    until each had a new holder."""
    found = []
    for f in summaries:
        start_ns = (load_start + f.start_s) * 1e9
        if f.lock is not None:
            # from the crash itself: start_s is rounded to the millisecond, and
            # a holder doomed before it took the lock crashed as it took it
            crashes = holds.released_ns[holds.crashed & (holds.lock == f.lock)]
            if len(crashes):
                start_ns = float(crashes[np.argmin(np.abs(crashes - start_ns))])
            held = [f.lock]
        else:
            released = np.where(holds.released_ns > 0, holds.released_ns, np.iinfo(np.int64).max)
            spans = (holds.acquired_ns <= start_ns) & (released > start_ns)
            held = sorted({int(n) for n in holds.lock[spans]})
        update = {"locks_held": len(held), "lock_recovery_s": _regained_s(holds, held, start_ns)}
        found.append(f.model_copy(update=update))
    return found


def _regained_s(holds: LockHolds, locks: Sequence[int], start_ns: float) -> float | None:
    """Seconds from ``start_ns`` until each of ``locks`` had a new holder
    (None: one had none within the load, or there were none)."""
    firsts = [holds.regained(number, int(start_ns)) for number in locks]
    if not firsts or None in firsts:
        return None
    return round((max(t for t in firsts if t is not None) - start_ns) / 1e9, 3)


def _summary(window: Window, line: _Timeline, since: float, horizon: float) -> FaultSummary:
    start = window.start_s
    gap_from, gap_to = line.longest_gap(start, horizon)
    before = line.per_second(since, start)
    if len(before) == 0:  # no whole second since the last window: take all before
        before = line.per_second(0.0, start)
    recovery = _recovery(line, start, horizon, float(np.median(before))) if len(before) else None
    in_fault = (line.failed_s >= start) & (line.failed_s < horizon)
    errors = Counter(k for k, hit in zip(line.failed_kind, in_fault, strict=True) if hit)
    during_end = window.end_s if window.end_s is not None else horizon
    after_end = horizon if window.end_s is None else min(window.end_s + SIDE_S, horizon)
    after = line.successes(window.end_s, after_end) if window.end_s is not None else np.zeros(0)
    around = line.successes(start, after_end)
    return FaultSummary(
        number=window.number,
        action=window.fault.action,
        target=window.fault.target,
        member=window.fault.member,
        undo=window.undo.action if window.undo is not None else "",
        start_s=round(start, 3),
        end_s=None if window.end_s is None else round(window.end_s, 3),
        description=window.describe(),
        new_leader_s=window.fault.new_leader_s,
        unavailable_s=round(gap_to - gap_from, 3),
        unavailable_from_s=round(gap_from, 3),
        recovered=recovery is not None,
        recovery_s=None if recovery is None else round(recovery, 3),
        errors=dict(errors.most_common()),
        p99_before_ms=_p99(line.successes(start - SIDE_S, start)),
        p99_during_ms=_p99(line.successes(start, during_end)),
        p99_after_ms=_p99(after),
        slowest_ms=float(around.max()) if len(around) else None,
        took_s=round(window.end_s - start, 3)
        if window.event and window.end_s is not None
        else None,
        detail=window.fault.detail,
        lock=window.fault.lock,
    )


def _recovery(line: _Timeline, start: float, horizon: float, median: float) -> float | None:
    """Seconds from ``start`` until the end of the first whole second of
    successes back at RECOVERED_SHARE of ``median`` after first falling below
    it (0 when it never fell); None when it is not back before ``horizon``."""
    if median <= 0:
        return None
    # whole seconds while requests were still offered
    end = min(horizon, line.last_sent_s)
    begins = np.arange(start, end - 1.0 + 1e-9, _STEP_S)
    if len(begins) == 0:
        return None
    counts = np.searchsorted(line.ok_s, begins + 1.0) - np.searchsorted(line.ok_s, begins)
    back = counts >= RECOVERED_SHARE * median
    fell = np.flatnonzero(~back)
    if len(fell) == 0:
        return 0.0
    again = np.flatnonzero(back[fell[0] :])
    if len(again) == 0:
        return None
    return float(begins[fell[0] + again[0]] + 1.0 - start)


def _p99(latency_ms: npt.NDArray[np.float64]) -> float | None:
    return float(np.percentile(latency_ms, 99)) if len(latency_ms) else None
