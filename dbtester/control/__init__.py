"""The controller: runs a test case database by database (agents, load,
verification, files) and hands the results directory to the rendering."""

from dbtester.control.database_run import run_database
from dbtester.control.run import RunOutcome, default_out, run_case, select

__all__ = ["RunOutcome", "default_out", "run_case", "run_database", "select"]
