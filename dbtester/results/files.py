"""Opening a results directory's files defensively: a directory may come from
anywhere (a colleague's upload, a bucket), so a reader only ever opens a
regular file, never a FIFO that blocks it or a device that never ends, and
never reads more than a file of that kind can hold."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dbtester.errors import ResultsError

__all__ = [
    "check_regular_file",
    "check_unicode",
    "present",
    "read_arrays",
    "read_regular_file",
]


def present(path: Path) -> bool:
    """Whether anything is at ``path``: a symbolic link that leads nowhere (or
    in a loop) is there, and reading it says why it cannot be read."""
    return path.is_symlink() or path.exists()


def check_regular_file(path: Path) -> int:
    """The size of ``path``, a regular file (symbolic links followed);
    ResultsError naming it when it is anything else or cannot be read."""
    try:
        info = path.stat()
    except OSError as exc:
        raise ResultsError(path, f"cannot read: {exc.strerror or exc}") from None
    except ValueError:  # a NUL in the name
        raise ResultsError(path, "cannot read: not a usable file name") from None
    if not stat.S_ISREG(info.st_mode):
        raise ResultsError(path, "not a regular file")
    return info.st_size


def read_arrays(
    path: Path,
    columns: Mapping[str, np.dtype[Any]],
    what: str,
    others: Sequence[str] = (),
    optional: Sequence[str] = (),
) -> dict[str, npt.NDArray[Any]]:
    """The equally long ``columns`` of the ``.npz`` file at ``path``, each of
    its dtype, and its ``others`` as they are (their caller checks them);
    ResultsError naming the file (and ``what`` it should hold) when it is
    not one, is damaged, or the columns do not match. Of ``columns``, those
    named in ``optional`` (added by a later schema) may be missing: they are
    then left out of the result."""
    check_regular_file(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            wanted = (*columns, *others)
            found = {
                name: data[name] for name in wanted if name not in optional or name in data.files
            }
    except KeyError as exc:
        raise ResultsError(path, f"no {exc.args[0]} array: not dbtester's {what}") from None
    except Exception as exc:  # numpy and zipfile fail in many ways on damaged bytes
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ResultsError(path, f"cannot read the {what}: {reason}") from None
    present = [name for name in columns if name in found]
    if len({len(found[name]) for name in present}) > 1:
        raise ResultsError(path, "the columns differ in length")
    for name in present:
        dtype = columns[name]
        if found[name].dtype != dtype:
            raise ResultsError(path, f"{name} is {found[name].dtype}, expected {dtype}")
    return found


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes."""
    size = check_regular_file(path)
    if size > limit:
        raise ResultsError(path, f"{size:,} bytes: larger than dbtester writes ({limit:,})")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never blocks, should it change
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise ResultsError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ResultsError(path, f"larger than dbtester writes ({limit:,} bytes)")
    return data


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_unicode(path: Path, data: Any) -> None:
    """ResultsError unless every string in ``data`` (parsed JSON or YAML) is
    text a file or a terminal can take: JSON's and YAML's "\ud800" escapes
    decode to half a character, which writing the README would choke on."""
    todo = [data]
    while todo:
        value = todo.pop()
        if isinstance(value, str):
            if half := _SURROGATE.search(value):
                raise ResultsError(path, f"holds {half[0]!r}: half of a UTF-16 pair, not text")
        elif isinstance(value, dict):
            todo.extend(value.keys())
            todo.extend(value.values())
        elif isinstance(value, list):
            todo.extend(value)
