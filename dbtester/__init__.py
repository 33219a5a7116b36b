"""dbtester: benchmark distributed key-value databases and publish the results."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dbtester")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
