"""What a Kubernetes load's informers saw, saved as ``<db-id>/informer-lags.npz``:
one row per put event that carried its write's send time: the informer (its
index) and the event's lag, from the write's send to its arrival, in
microseconds on the engine's clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dbtester.results.files import read_arrays

__all__ = ["InformerLags"]

_COLUMNS: dict[str, np.dtype[Any]] = {
    "informer": np.dtype(np.uint16),
    "lag_us": np.dtype(np.uint32),
}


@dataclass(frozen=True)
class InformerLags:
    informer: npt.NDArray[np.uint16]
    lag_us: npt.NDArray[np.uint32]

    def __len__(self) -> int:
        return len(self.informer)

    @classmethod
    def of(cls, per_informer: Sequence[npt.ArrayLike]) -> InformerLags:
        """From each informer's lags, in informer order."""
        lags = [np.asarray(lag, dtype=np.uint32) for lag in per_informer]
        informer = [np.full(len(lag), i, dtype=np.uint16) for i, lag in enumerate(lags)]
        empty16, empty32 = np.zeros(0, np.uint16), np.zeros(0, np.uint32)
        return cls(
            np.concatenate(informer) if informer else empty16,
            np.concatenate(lags) if lags else empty32,
        )

    def lag_ms(self) -> npt.NDArray[np.float64]:
        return self.lag_us.astype(np.float64) / 1e3

    def save(self, path: Path) -> None:
        np.savez(path, informer=self.informer, lag_us=self.lag_us)

    @classmethod
    def load(cls, path: Path) -> InformerLags:
        """The lags saved at ``path``; ResultsError (naming it) if they cannot be."""
        columns = read_arrays(path, _COLUMNS, "informer lags")
        return cls(**columns)
