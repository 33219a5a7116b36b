"""The load generator: the native engine (``dbtester._engine``) drives a
workload against a database's endpoints and records every request
(``dbtester.results.Records``); this package is its Python boundary."""

from dbtester.load.runner import (
    DEFAULT_WORKERS,
    STALLED,
    LoadOptions,
    LoadResult,
    load_keys,
    run_load,
    seed_key,
    wait_readable,
    warm_up,
)

__all__ = [
    "DEFAULT_WORKERS",
    "STALLED",
    "LoadOptions",
    "LoadResult",
    "load_keys",
    "run_load",
    "seed_key",
    "wait_readable",
    "warm_up",
]
