"""What a watch load's watchers saw, saved as ``<db-id>/watch-events.npz``.

Every (event, watcher) pair is one row of four compact columns: the watcher,
the key's offset from the load's first key (its put's position in the load's
key range), the latency in microseconds (arrival minus the put's send time,
both on the engine's one clock) and the arrival in milliseconds since
``origin_unix_ns``. Which keys each watcher saw is a bitset (``seen``:
``words`` 64-bit words per watcher), so what it missed can be counted against
the puts that were acknowledged. 100 watchers of 100,000 puts take 120 MB.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dbtester.errors import ResultsError
from dbtester.results.files import read_arrays

__all__ = ["WatchEvents"]

_COLUMNS: dict[str, np.dtype[Any]] = {
    "watcher": np.dtype(np.uint16),
    "key": np.dtype(np.uint32),
    "latency_us": np.dtype(np.uint32),
    "arrival_ms": np.dtype(np.uint32),
}
_PER_WATCHER = ("duplicates", "out_of_order", "foreign", "coalesced", "split")
#: the rest of the file, each checked on its own
_OTHERS = (
    "seen",
    "origin_unix_ns",
    "acked",
    "keys",
    "sent_ms",
    "duplicate_watcher",
    "duplicate_ms",
)
#: sent_ms of a put never sent
_UNSENT = 2**32 - 1


@dataclass(frozen=True)
class WatchEvents:
    watcher: npt.NDArray[np.uint16]
    key: npt.NDArray[np.uint32]
    latency_us: npt.NDArray[np.uint32]
    arrival_ms: npt.NDArray[np.uint32]
    #: which keys each watcher saw: watchers x words 64-bit words
    seen: npt.NDArray[np.uint64]
    #: per watcher: events of a key it had seen already, events whose
    #: revision was not above the last it saw, events of keys no put of the
    #: load wrote, and keys that came in one reply with an earlier key
    #: (Consul's blocking queries) rather than as events of their own
    duplicates: npt.NDArray[np.uint64]
    out_of_order: npt.NDArray[np.uint64]
    foreign: npt.NDArray[np.uint64]
    coalesced: npt.NDArray[np.uint64]
    #: per watcher: replies that began with another key of the revision the
    #: reply before ended with (an etcd revision split across replies)
    split: npt.NDArray[np.uint64]
    #: arrival_ms counts from this moment (unix ns)
    origin_unix_ns: int
    #: bit k: the put of the key at offset k was acknowledged
    acked: npt.NDArray[np.uint64]
    #: the puts of the load (key offsets 0 .. keys - 1)
    keys: int
    #: per key offset: when its put was sent, in ms since ``origin_unix_ns``
    #: (2**32 - 1: never sent)
    sent_ms: npt.NDArray[np.uint32]
    #: every duplicate event: its watcher and its arrival (ms since the origin)
    duplicate_watcher: npt.NDArray[np.uint16]
    duplicate_ms: npt.NDArray[np.uint32]

    @property
    def watchers(self) -> int:
        return len(self.duplicates)

    def __len__(self) -> int:
        return len(self.watcher)

    def acknowledged(self) -> npt.NDArray[np.bool_]:
        """Per key offset: its put was acknowledged (its event is expected)."""
        bits = np.unpackbits(self.acked.view(np.uint8), bitorder="little")
        return bits[: self.keys].astype(bool)

    def received(self) -> npt.NDArray[np.int64]:
        """Per watcher: how many distinct keys' events reached it as events of
        their own (received + coalesced = the keys it saw)."""
        seen = np.asarray(self._seen().sum(axis=1), dtype=np.int64)
        return seen - self.coalesced.astype(np.int64)

    def missed(self) -> npt.NDArray[np.int64]:
        """Per watcher: how many acknowledged puts' events it never received."""
        return np.asarray(self._unreceived().sum(axis=1), dtype=np.int64)

    def _unreceived(self) -> npt.NDArray[np.bool_]:
        """Watchers x key offsets: an acknowledged put's event the watcher
        never received."""
        return self.acknowledged()[np.newaxis, :] & ~self._seen()

    def _seen(self) -> npt.NDArray[np.bool_]:
        bits = np.unpackbits(self.seen.view(np.uint8), bitorder="little")
        return bits.reshape(self.watchers, -1)[:, : self.keys].astype(bool)

    def arrival_unix_s(self) -> npt.NDArray[np.float64]:
        return self.origin_unix_ns / 1e9 + self.arrival_ms / 1e3

    def sent_unix_s(self) -> npt.NDArray[np.float64]:
        """Per key offset: when its put was sent (NaN: never)."""
        sent = self.origin_unix_ns / 1e9 + self.sent_ms / 1e3
        return np.where(self.sent_ms == _UNSENT, np.nan, sent)

    def duplicate_unix_s(self) -> npt.NDArray[np.float64]:
        return self.origin_unix_ns / 1e9 + self.duplicate_ms / 1e3

    def unexpected(self) -> int:
        """Events received of puts never acknowledged (their reply was lost,
        but they took effect), summed over the watchers."""
        return int((~self.acknowledged()[np.newaxis, :] & self._seen()).sum())

    def missing(self) -> npt.NDArray[np.int64]:
        """Per key offset: how many watchers never received its acknowledged
        put's event."""
        return np.asarray(self._unreceived().sum(axis=0), dtype=np.int64)

    def first_missed(self) -> tuple[int, int] | None:
        """The watcher and key offset of the missed event whose put was sent
        first (None: no watcher missed an acknowledged put)."""
        watchers, offsets = np.nonzero(self._unreceived())
        if not len(offsets):
            return None
        first = int(np.argmin(self.sent_ms[offsets]))
        return int(watchers[first]), int(offsets[first])

    def save(self, path: Path) -> None:
        np.savez(
            path,
            watcher=self.watcher,
            key=self.key,
            latency_us=self.latency_us,
            arrival_ms=self.arrival_ms,
            seen=self.seen,
            duplicates=self.duplicates,
            out_of_order=self.out_of_order,
            foreign=self.foreign,
            coalesced=self.coalesced,
            split=self.split,
            origin_unix_ns=np.array([self.origin_unix_ns], dtype=np.int64),
            acked=self.acked,
            keys=np.array([self.keys], dtype=np.int64),
            sent_ms=self.sent_ms,
            duplicate_watcher=self.duplicate_watcher,
            duplicate_ms=self.duplicate_ms,
        )

    @classmethod
    def load(cls, path: Path) -> WatchEvents:
        """The events saved at ``path``; ResultsError (naming it) if they cannot be."""
        columns = read_arrays(path, _COLUMNS, "watch events", others=(*_PER_WATCHER, *_OTHERS))
        counts = {name: columns[name] for name in _PER_WATCHER}
        seen, origin, acked, keys, sent_ms, duplicate_watcher, duplicate_ms = (
            columns[name] for name in _OTHERS
        )
        if acked.dtype != np.uint64 or len(keys) != 1 or not 0 <= int(keys[0]) <= 64 * len(acked):
            raise ResultsError(path, "the acknowledged puts do not match")
        watchers = len(counts["duplicates"])
        if any(len(c) != watchers for c in counts.values()) or seen.dtype != np.uint64:
            raise ResultsError(path, "the per-watcher counts do not match")
        if watchers and len(seen) % watchers:
            raise ResultsError(path, "the seen bits do not divide among the watchers")
        if len(columns["watcher"]) and int(columns["watcher"].max()) >= watchers:
            raise ResultsError(path, "an event names a watcher that is not there")
        if sent_ms.dtype != np.uint32 or len(sent_ms) != int(keys[0]):
            raise ResultsError(path, "the puts' send times do not match the puts")
        if len(duplicate_watcher) != len(duplicate_ms):
            raise ResultsError(path, "the duplicates' columns differ in length")
        return cls(
            columns["watcher"],
            columns["key"],
            columns["latency_us"],
            columns["arrival_ms"],
            seen,
            counts["duplicates"].astype(np.uint64),
            counts["out_of_order"].astype(np.uint64),
            counts["foreign"].astype(np.uint64),
            counts["coalesced"].astype(np.uint64),
            counts["split"].astype(np.uint64),
            int(origin[0]) if len(origin) else 0,
            acked,
            int(keys[0]),
            sent_ms,
            duplicate_watcher.astype(np.uint16),
            duplicate_ms.astype(np.uint32),
        )
