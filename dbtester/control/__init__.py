"""The controller: runs a test case database by database (agents, load,
verification, files) and hands the results directory to the analysis."""

from dbtester.control.run import RunOutcome, default_out, print_outcome, run_case, select
from dbtester.control.session import DatabaseRun

__all__ = ["DatabaseRun", "RunOutcome", "default_out", "print_outcome", "run_case", "select"]
