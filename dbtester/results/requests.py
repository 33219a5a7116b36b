"""Every request's outcome, in compact numpy arrays (8 + 8 + 8 + 1 + 2 + 1 + 1
bytes), saved as ``<db-id>/client-latency.npz``.

The load engine fills them (one slot per request) and hands them over without
a copy. Latency is measured from when a request was *due* (issued, in
closed loop; scheduled, in open loop), so a slow server cannot hide queueing;
``service_ns`` is the time from sending to the reply. ``queued`` is 1 for an
open-loop request that found every client busy at its due time and waited
for one (the open loop's queue); for the others ``latency_ns - service_ns``
is the engine's send lag, from the due time to when it began sending.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dbtester.errors import ResultsError
from dbtester.results.files import check_regular_file, check_unicode

__all__ = ["NOT_ERRORS", "OK", "OPERATIONS", "UNKNOWN_OP", "UNKNOWN_QUEUED", "Records"]

OK = "ok"
#: outcomes that are not errors: a read-modify-write that lost its race to
#: another writer ("conflict") is the database doing its job
NOT_ERRORS = frozenset({OK, "conflict"})
#: the ``op`` column's values, by number (the engine's order)
OPERATIONS = (
    "read",
    "update",
    "insert",
    "read-modify-write",
    # type: kubernetes (its update is "update")
    "get",
    "list",
    "create",
    "delete",
    "event",  # an event's create, leased (schema 17)
    "acquire",  # type: lock: a lock's acquisition (schema 20)
)
#: ``op`` of records saved before operations were recorded (schema < 6)
UNKNOWN_OP = 255
#: ``queued`` of records saved before it was recorded
UNKNOWN_QUEUED = 255
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
    #: the operation, an index into OPERATIONS (UNKNOWN_OP: not recorded)
    op: npt.NDArray[np.uint8] | None = None
    #: 1: waited for a busy client (open loop); 0: sent on time; UNKNOWN_QUEUED
    queued: npt.NDArray[np.uint8] | None = None

    def __post_init__(self) -> None:
        if self.op is None:
            self.op = np.full(len(self.due_ns), UNKNOWN_OP, np.uint8)
        if self.queued is None:
            self.queued = np.full(len(self.due_ns), UNKNOWN_QUEUED, np.uint8)

    @property
    def waited(self) -> npt.NDArray[np.uint8]:
        """The ``queued`` column (always set after construction)."""
        assert self.queued is not None
        return self.queued

    def send_lag_ns(self) -> npt.NDArray[np.int64]:
        """Each request sent when due (a client was free): from its due time
        to when the engine began sending it."""
        on_time = self.waited == 0
        lag: npt.NDArray[np.int64] = self.latency_ns[on_time] - self.service_ns[on_time]
        return lag

    @property
    def ops(self) -> npt.NDArray[np.uint8]:
        """The ``op`` column (always set after construction)."""
        assert self.op is not None
        return self.op

    def operations(self) -> list[str]:
        """The operations these records hold, in OPERATIONS' order (none for
        records saved before operations were recorded)."""
        present = np.unique(self.ops)
        return [OPERATIONS[int(i)] for i in present if int(i) < len(OPERATIONS)]

    def subset(self, mask: npt.NDArray[np.bool_]) -> Records:
        """The records ``mask`` selects, with the same outcome table."""
        return Records(
            self.due_ns[mask],
            self.latency_ns[mask],
            self.service_ns[mask],
            self.code[mask],
            self.step[mask],
            self.codes,
            self.ops[mask],
            self.waited[mask],
        )

    def moved(self, by_ns: int) -> Records:
        """The same records with every due time ``by_ns`` later: from one
        clock onto another."""
        if not by_ns:
            return self
        return Records(
            self.due_ns + by_ns,
            self.latency_ns,
            self.service_ns,
            self.code,
            self.step,
            self.codes,
            self.ops,
            self.waited,
        )

    def errors(self) -> int:
        """Requests whose outcome is an error (not in NOT_ERRORS)."""
        counts = self.counts()
        return sum(n for name, n in counts.items() if name not in NOT_ERRORS)

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
            op=self.ops,
            queued=self.waited,
            codes=np.array(self.codes),
        )

    @classmethod
    def load(cls, path: Path) -> Records:
        """The records saved at ``path``; ResultsError (naming it) if they cannot be."""
        check_regular_file(path)
        try:
            _check_declared_sizes(path)
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in _ARRAYS}
                table = data["codes"]
                # Saved since schema 6; older records read as "not recorded".
                op = data["op"] if "op" in data.files else None
                queued = data["queued"] if "queued" in data.files else None
        except KeyError as exc:
            raise ResultsError(path, f"no {exc.args[0]} array: not dbtester's records") from None
        except ResultsError:
            raise
        except MemoryError:
            raise ResultsError(path, "too large to load into this machine's memory") from None
        except Exception as exc:  # numpy and zipfile fail in many ways on damaged bytes
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ResultsError(path, f"cannot read the records: {reason}") from None
        for name, array in arrays.items():
            if array.ndim != 1:
                raise ResultsError(path, f"{name} is not a list of values (shape {array.shape})")
        if len({len(a) for a in arrays.values()}) > 1:
            raise ResultsError(path, "the record arrays differ in length")
        for name, dtype in _ARRAYS.items():
            if arrays[name].dtype != dtype:
                raise ResultsError(path, f"{name} is {arrays[name].dtype}, expected {dtype}")
        codes = _outcome_table(path, table, arrays["code"])
        _check_op(path, op, len(arrays["code"]))
        _check_op(path, queued, len(arrays["code"]), "queued")
        return cls(
            arrays["due_ns"],
            arrays["latency_ns"],
            arrays["service_ns"],
            arrays["code"],
            arrays["step"],
            codes,
            op,
            queued,
        )

    def counts(self) -> dict[str, int]:
        found = np.bincount(self.code, minlength=len(self.codes))
        return {name: int(n) for name, n in zip(self.codes, found, strict=False) if n}

    def sent_ns(self) -> npt.NDArray[np.int64]:
        """When each request went out (unix ns): its due time plus its wait for
        a free client (in open loop it may be sent long after it was due)."""
        return self.due_ns + self.latency_ns - self.service_ns

    def span_s(self, origin_s: float = 0.0) -> float:
        """Seconds from the first request's due time to the last completion:
        the load's duration (TOTAL-SECONDS). Both ends are taken in seconds
        since ``origin_s`` (the load's start), as the charts' axis is, so the
        figure is the same to the last digit wherever it is computed."""
        if len(self) == 0:
            return 0.0
        done = (self.due_ns + self.latency_ns) / 1e9 - origin_s
        first = self.due_ns.min() / 1e9 - origin_s
        return float(done.max() - first)

    def throughput(self, origin_s: float = 0.0) -> float:
        """Answered requests per second over :meth:`span_s`: AVG-THROUGHPUT,
        the one definition the table, the console and comparisons use."""
        span = self.span_s(origin_s)
        return float((self.code == 0).sum() / span) if span > 0 else 0.0


def _outcome_table(path: Path, table: npt.NDArray[Any], code: npt.NDArray[np.uint8]) -> list[str]:
    if table.ndim != 1 or table.dtype.kind != "U":
        raise ResultsError(path, "the outcome table is not a list of names")
    codes = [str(c) for c in table]
    check_unicode(path, codes)
    if not codes or codes[0] != OK:
        raise ResultsError(path, "the outcome table does not start with 'ok'")
    if len(code) and int(code.max()) >= len(codes):
        raise ResultsError(path, "an outcome code is outside the outcome table")
    return codes


def _check_op(path: Path, op: npt.NDArray[Any] | None, length: int, name: str = "op") -> None:
    if op is not None and (op.ndim != 1 or op.dtype != np.uint8 or len(op) != length):
        raise ResultsError(path, f"the {name} array does not match the records")


def _check_declared_sizes(path: Path) -> None:
    """Every array in the archive holds the bytes its header declares: numpy
    allocates what a header declares before it reads, so a forged header (an
    array of 2**40 values in a file of a few bytes) must never reach it."""
    if not zipfile.is_zipfile(path):
        return  # np.load says what it is instead
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            if not member.filename.endswith(".npy"):
                continue
            with archive.open(member) as handle:
                version = np.lib.format.read_magic(handle)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
                else:
                    shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
                header = handle.tell()
            declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
            held = max(0, member.file_size - header)
            if declared > held:
                raise ResultsError(
                    path,
                    f"{member.filename} declares {declared:,} bytes of data but holds {held:,}",
                )
