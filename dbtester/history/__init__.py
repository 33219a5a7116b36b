"""``dbtester history SOURCE``: every run under a local folder or a bucket
prefix, queried with DuckDB — a table of runs x metrics per database and
version, trend charts, and a regression gate (``--check``) that compares each
database's newest run with a baseline using the trials statistics.

Above ``results`` and ``analyze`` (like ``compare``); nothing below imports it.
"""

from dbtester.history.check import Check, Verdict, check_history, machines_of
from dbtester.history.query import History, RunFigures, load_history
from dbtester.history.source import Source, open_source

__all__ = [
    "Check",
    "History",
    "RunFigures",
    "Source",
    "Verdict",
    "check_history",
    "load_history",
    "machines_of",
    "open_source",
]
