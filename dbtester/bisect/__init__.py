"""``dbtester bisect``: locate the first released version with a change, by
halving the range between a good and a bad version, each step a
``repeat: auto`` run against the good one."""

from dbtester.bisect.run import BisectOptions, BisectOutcome, bisect, default_folder

__all__ = ["BisectOptions", "BisectOutcome", "bisect", "default_folder"]
