"""What the checked clients did, saved as ``<db-id>/check-history.npz``: one
row per operation (client, key, read or write, how it ended, the value
written or read, invoked and completed in unix ns on the engine's clock, and
the member its connection was on when it ended: an index into the
database's endpoints, NO_MEMBER when the protocol cannot tell).
Values: 0 is a key's absence; 2**64 - 1 a read of bytes no checked client
wrote. Ended: 0 ok, 2 unknown (a write that may have been applied; a read
that returned nothing to check).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dbtester.errors import ResultsError
from dbtester.results.files import read_arrays

__all__ = ["ENDED_OK", "ENDED_UNKNOWN", "NO_MEMBER", "CheckedOperations"]

ENDED_OK = 0
ENDED_UNKNOWN = 2
#: an operation's member when the protocol cannot tell (ZooKeeper's sessions)
NO_MEMBER = 2**16 - 1

_COLUMNS: dict[str, np.dtype[Any]] = {
    "client": np.dtype(np.uint16),
    "key": np.dtype(np.uint16),
    "write": np.dtype(np.uint8),
    "ended": np.dtype(np.uint8),
    "value": np.dtype(np.uint64),
    "invoked_ns": np.dtype(np.int64),
    "completed_ns": np.dtype(np.int64),
    "member": np.dtype(np.uint16),
}


@dataclass(frozen=True)
class CheckedOperations:
    client: npt.NDArray[np.uint16]
    key: npt.NDArray[np.uint16]
    write: npt.NDArray[np.uint8]
    ended: npt.NDArray[np.uint8]
    value: npt.NDArray[np.uint64]
    invoked_ns: npt.NDArray[np.int64]
    completed_ns: npt.NDArray[np.int64]
    member: npt.NDArray[np.uint16]

    def __len__(self) -> int:
        return len(self.client)

    def save(self, path: Path) -> None:
        np.savez(path, **{name: getattr(self, name) for name in _COLUMNS})

    def moved(self, by_ns: int) -> CheckedOperations:
        """The same operations ``by_ns`` later, from one clock onto another;
        an operation with no reply (completed_ns 0) keeps none."""
        if not by_ns:
            return self
        completed = self.completed_ns.copy()
        completed[completed > 0] += by_ns
        return replace(self, invoked_ns=self.invoked_ns + by_ns, completed_ns=completed)

    @classmethod
    def of(cls, columns: Mapping[str, Any]) -> CheckedOperations:
        """The operations in ``columns`` (the engine's: array-likes by name),
        each column as its type."""
        return cls(**{name: np.asarray(columns[name], dtype=t) for name, t in _COLUMNS.items()})

    @classmethod
    def load(cls, path: Path) -> CheckedOperations:
        """The operations saved at ``path``; ResultsError (naming it) if they cannot be."""
        columns = read_arrays(path, _COLUMNS, "checked operations")
        if not np.isin(columns["ended"], (ENDED_OK, ENDED_UNKNOWN)).all():
            raise ResultsError(path, "an operation ended in a way no engine records")
        return cls(**columns)
