"""The per-second metrics files of a results directory: their columns, and
reading them back checked.

``server-<i>-metrics.csv`` is written by the agent's sampler on the member's
machine (columns :data:`SERVER_COLUMNS`, documented in
``dbtester.agent.sampler``); ``client-metrics.csv`` by the load generator's
sampler (:data:`CLIENT_COLUMNS`).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dbtester.errors import ResultsError
from dbtester.results.files import check_regular_file, present

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CLIENT_COLUMNS", "HOST_COLUMNS", "SERVER_COLUMNS", "STORAGE_COLUMNS", "read_metrics"]

SERVER_COLUMNS = (
    "unix_ms",
    "pid",
    "cpu_percent",
    "rss_bytes",
    "threads",
    "voluntary_ctxt_switches",
    "nonvoluntary_ctxt_switches",
    "read_bytes",
    "write_bytes",
    "reads_completed",
    "sectors_read",
    "writes_completed",
    "sectors_written",
    "receive_bytes",
    "transmit_bytes",
    "data_dir_bytes",
)

#: the host-speed probe's columns, in both files since results schema 8 (an
#: older file has none): probe_ns, the CPU nanoseconds the probe's fixed piece
#: of work took (dbtester.util.speed; higher is a slower CPU), and steal_ms,
#: the delta of the host's steal time summed over its CPUs
HOST_COLUMNS = ("probe_ns", "steal_ms")

#: the database's own size, where its kind reports one (etcd's dbSize and
#: dbSizeInUse; DatabaseKind.size_probe), last in a member's file since
#: results schema 18: db_bytes, its database file, and db_in_use_bytes, the
#: part of it holding live data; -1 in a second the member did not say
#: (paused, starting): read back as not known
STORAGE_COLUMNS = ("db_bytes", "db_in_use_bytes")

# unix_ms, cpu_percent (100 = one core, the whole load generator), rss_bytes,
# receive_bytes, transmit_bytes (deltas), requests_done, errors (cumulative).
CLIENT_COLUMNS = (
    "unix_ms",
    "cpu_percent",
    "rss_bytes",
    "receive_bytes",
    "transmit_bytes",
    "requests_done",
    "errors",
)


def read_metrics(
    path: Path, columns: Sequence[str], optional: Sequence[str] = HOST_COLUMNS
) -> pd.DataFrame | None:
    """The samples in ``path``; None when it is missing or holds none (a member
    that died at once). ResultsError, naming the file, when it is corrupt.
    ``optional`` columns are kept, checked as the others, where the file has
    them (files written before they existed do not)."""
    # pandas on first use: every command imports this package, most never read
    # metrics, and pandas (with pyarrow beside it) costs ~40 MB and ~0.4 s.
    import pandas as pd

    if not present(path):
        return None
    if check_regular_file(path) == 0:
        return None
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    except MemoryError:
        raise ResultsError(path, "too large to load into this machine's memory") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OverflowError, csv.Error) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise ResultsError(path, f"not a metrics CSV: {reason}") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ResultsError(path, f"missing columns: {', '.join(missing)}")
    if not len(frame):
        return None
    columns = [*columns, *(c for c in optional if c in frame.columns and c not in columns)]
    for column in columns:
        values = frame[column]
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            raise ResultsError(path, f"column {column} holds values that are not numbers")
        if not np.isfinite(values.to_numpy(dtype=float)).all():
            # an empty cell (NaN) or inf: the samplers write neither
            raise ResultsError(path, f"column {column} holds a value that is not a finite number")
    # Only the columns checked: another (a column repeated by hand, which
    # pandas keeps as NAME.1, holding text) once reached the analysis and
    # ended `dbtester analyze` in a traceback.
    return frame[list(columns)]
