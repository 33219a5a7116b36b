"""The results directory: its layout, its typed and versioned records, and the
only code that reads or writes its files.

Everything that produces results (the run, the load generator) and everything
that reads them (analysis, publishing, comparisons) goes through this package;
it imports nothing from dbtester above ``errors``.
"""

from dbtester.results.checked import CheckedOperations
from dbtester.results.informers import InformerLags
from dbtester.results.layout import DatabaseLayout, ResultsLayout
from dbtester.results.locks import LockHolds, SessionExpiry
from dbtester.results.metrics import (
    CLIENT_COLUMNS,
    HOST_COLUMNS,
    SERVER_COLUMNS,
    STORAGE_COLUMNS,
    read_metrics,
)
from dbtester.results.model import (
    KNOWN_REFUSALS,
    CheckedOperationRecord,
    CompactionRecord,
    ComparisonRecord,
    CorrectnessRecord,
    DatabaseRecord,
    DatabaseSummary,
    Environment,
    FaultRecord,
    FaultSummary,
    FigureValue,
    InformerRecord,
    LoadHostRecord,
    LoadWindow,
    LookRecord,
    Machines,
    MemberRecord,
    ProbeRecord,
    RunSummary,
    SearchRecord,
    SequentialRecord,
    Verification,
    ViolationRecord,
    WatchCheckRecord,
    account,
)
from dbtester.results.requests import NOT_ERRORS, OK, OPERATIONS, Records
from dbtester.results.schema import SCHEMA_VERSION, upgrade
from dbtester.results.store import (
    CaseInfo,
    DatabaseResults,
    ResultsDir,
    RunResults,
    TrialResults,
)
from dbtester.results.watch import WatchEvents

__all__ = [
    "CLIENT_COLUMNS",
    "HOST_COLUMNS",
    "KNOWN_REFUSALS",
    "NOT_ERRORS",
    "OK",
    "OPERATIONS",
    "SCHEMA_VERSION",
    "SERVER_COLUMNS",
    "STORAGE_COLUMNS",
    "CaseInfo",
    "CheckedOperationRecord",
    "CheckedOperations",
    "CompactionRecord",
    "ComparisonRecord",
    "CorrectnessRecord",
    "DatabaseLayout",
    "DatabaseRecord",
    "DatabaseResults",
    "DatabaseSummary",
    "Environment",
    "FaultRecord",
    "FaultSummary",
    "FigureValue",
    "InformerLags",
    "InformerRecord",
    "LoadHostRecord",
    "LoadWindow",
    "LockHolds",
    "LookRecord",
    "Machines",
    "MemberRecord",
    "ProbeRecord",
    "Records",
    "ResultsDir",
    "ResultsLayout",
    "RunResults",
    "RunSummary",
    "SearchRecord",
    "SequentialRecord",
    "SessionExpiry",
    "TrialResults",
    "Verification",
    "ViolationRecord",
    "WatchCheckRecord",
    "WatchEvents",
    "account",
    "read_metrics",
    "upgrade",
]
