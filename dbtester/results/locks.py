"""What a lock load's lockers held, saved as ``<db-id>/lock-holds.npz``: one
row per acquisition, on the engine's one clock (unix ns): the lock (its
number), the locker (its number), when its acquire was sent, when the reply
saying it held the lock arrived, when it began its release (0: it never
did), the fencing token the database gave it, and whether it crashed (an
``expire_session`` fault: it held the lock until then, released nothing,
and its session was left to expire; its "release" is when it crashed)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dbtester.results.files import read_arrays

__all__ = ["LockHolds", "SessionExpiry"]

_COLUMNS: dict[str, np.dtype[Any]] = {
    "lock": np.dtype(np.uint32),
    "locker": np.dtype(np.uint32),
    "asked_ns": np.dtype(np.int64),
    "acquired_ns": np.dtype(np.int64),
    "released_ns": np.dtype(np.int64),
    "token": np.dtype(np.int64),
    "crashed": np.dtype(np.bool_),
}


@dataclass(frozen=True)
class SessionExpiry:
    """An ``expire_session`` the engine applied: the ``number``-th (from 0)
    of the schedule's client faults made ``locker``, holding ``lock``, crash
    at ``unix``; a new holder acquired the lock at ``regained_unix`` (None:
    not within the load). Times on the engine's clock, in seconds."""

    number: int
    lock: int
    locker: int
    unix: float
    regained_unix: float | None


@dataclass(frozen=True)
class LockHolds:
    lock: npt.NDArray[np.uint32]
    locker: npt.NDArray[np.uint32]
    asked_ns: npt.NDArray[np.int64]
    acquired_ns: npt.NDArray[np.int64]
    released_ns: npt.NDArray[np.int64]
    token: npt.NDArray[np.int64]
    crashed: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return len(self.lock)

    @classmethod
    def of(cls, rows: Iterable[tuple[int, int, int, int, int, int, int]]) -> LockHolds:
        """From the engine's rows: (lock, locker, asked, acquired, released,
        token, crashed)."""
        table = np.array(list(rows), dtype=np.int64).reshape(-1, len(_COLUMNS))
        return cls(*(table[:, i].astype(dtype) for i, dtype in enumerate(_COLUMNS.values())))

    def of_lock(self, number: int) -> LockHolds:
        """Lock ``number``'s holds, in the order they were acquired."""
        mine = np.flatnonzero(self.lock == number)
        order = mine[np.argsort(self.acquired_ns[mine], kind="stable")]
        return LockHolds(*(getattr(self, name)[order] for name in _COLUMNS))

    def regained(self, number: int, after_ns: int) -> int | None:
        """When lock ``number`` was next acquired after ``after_ns`` (None: never)."""
        later = self.acquired_ns[(self.lock == number) & (self.acquired_ns > after_ns)]
        return int(later.min()) if len(later) else None

    def locks(self) -> list[int]:
        """The locks held at least once, in order."""
        return [int(n) for n in np.unique(self.lock)]

    def save(self, path: Path) -> None:
        np.savez(path, **{name: getattr(self, name) for name in _COLUMNS})

    @classmethod
    def load(cls, path: Path) -> LockHolds:
        """The holds saved at ``path``; ResultsError (naming it) if they cannot be."""
        found = read_arrays(path, _COLUMNS, "lock holds", optional=("crashed",))
        # schema 20 had no crashes: none of its holders crashed
        found.setdefault("crashed", np.zeros(len(found["lock"]), dtype=np.bool_))
        return cls(**found)
