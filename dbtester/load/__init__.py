"""The load generator: plan the client steps, drive a workload against a
database's endpoints, and record every request (``dbtester.results.Records``)."""

from dbtester.load.runner import LoadResult, plan_steps, run_load

__all__ = ["LoadResult", "plan_steps", "run_load"]
