"""``$DBTESTER_HOME`` pointed at a folder for a block of code in this
process (session fixtures cannot use monkeypatch), and put back after."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["home_at"]


@contextmanager
def home_at(home: Path) -> Iterator[Path]:
    previous = os.environ.get("DBTESTER_HOME")
    os.environ["DBTESTER_HOME"] = str(home)
    try:
        yield home
    finally:
        if previous is None:
            del os.environ["DBTESTER_HOME"]
        else:
            os.environ["DBTESTER_HOME"] = previous
