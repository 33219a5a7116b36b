"""Small, neutral helpers every part of dbtester may use; they import nothing
from dbtester above ``errors``.

- ``progress``: the one progress display (bars, timers, status lines)
- ``paths``: dbtester's home directory and the writable-directory check
- ``net``: host:port formatting, loopback tests, free ports, interfaces
- ``procs``: processes that die with their parent
- ``counters``: cumulative counters turned into never-negative deltas
- ``keys``: the key names a workload writes
"""
