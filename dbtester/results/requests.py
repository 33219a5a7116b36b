"""Every request's outcome, in compact numpy arrays (8 + 8 + 8 + 1 + 2 bytes),
saved as ``<db-id>/client-latency.npz``.

The load engine fills them (one slot per request) and hands them over without
a copy. Latency is measured from when a request was *due* (issued, in
closed loop; scheduled, in open loop), so a slow server cannot hide queueing;
``service_ns`` is the time from sending to the reply.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dbtester.errors import ResultsError

__all__ = ["OK", "Records"]

OK = "ok"
_ARRAYS = {
    "due_ns": np.dtype(np.int64),
    "latency_ns": np.dtype(np.int64),
    "service_ns": np.dtype(np.int64),
    "code": np.dtype(np.uint8),
    "step": np.dtype(np.uint16),
}


@dataclass
class Records:
    due_ns: npt.NDArray[np.int64]  # wall clock (unix ns) when the request was due
    latency_ns: npt.NDArray[np.int64]  # from due to reply
    service_ns: npt.NDArray[np.int64]  # from sending to reply
    code: npt.NDArray[np.uint8]  # index into codes; 0 = ok
    step: npt.NDArray[np.uint16]  # client step (0 without client_steps)
    codes: list[str]

    @classmethod
    def empty(cls, size: int) -> Records:
        return cls(
            np.zeros(size, np.int64),
            np.zeros(size, np.int64),
            np.zeros(size, np.int64),
            np.zeros(size, np.uint8),
            np.zeros(size, np.uint16),
            [OK],
        )

    def __len__(self) -> int:
        return len(self.due_ns)

    def save(self, path: Path) -> None:
        np.savez(
            path,
            due_ns=self.due_ns,
            latency_ns=self.latency_ns,
            service_ns=self.service_ns,
            code=self.code,
            step=self.step,
            codes=np.array(self.codes),
        )

    @classmethod
    def load(cls, path: Path) -> Records:
        """The records saved at ``path``; ResultsError (naming it) if they cannot be."""
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in _ARRAYS}
                codes = [str(c) for c in data["codes"]]
        except KeyError as exc:
            raise ResultsError(path, f"no {exc.args[0]} array: not dbtester's records") from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ResultsError(path, f"cannot read the records: {exc}") from None
        lengths = {len(a) for a in arrays.values()}
        if len(lengths) > 1 or any(a.ndim != 1 for a in arrays.values()):
            raise ResultsError(path, "the record arrays differ in length")
        for name, dtype in _ARRAYS.items():
            if arrays[name].dtype != dtype:
                raise ResultsError(path, f"{name} is {arrays[name].dtype}, expected {dtype}")
        if not codes or codes[0] != OK:
            raise ResultsError(path, "the outcome table does not start with 'ok'")
        if len(arrays["code"]) and int(arrays["code"].max()) >= len(codes):
            raise ResultsError(path, "an outcome code is outside the outcome table")
        return cls(
            arrays["due_ns"],
            arrays["latency_ns"],
            arrays["service_ns"],
            arrays["code"],
            arrays["step"],
            codes,
        )

    def counts(self) -> dict[str, int]:
        found = np.bincount(self.code, minlength=len(self.codes))
        return {name: int(n) for name, n in zip(self.codes, found, strict=False) if n}
