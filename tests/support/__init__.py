"""Helpers the tests share: import them from here, never from another
``test_*`` module (``tests/unit/test_test_hygiene.py`` enforces it).

- :mod:`tests.support.poll`: :func:`~tests.support.poll.poll_until`, for
  waiting on a condition instead of sleeping and hoping;
- :mod:`tests.support.cases`: test-case dicts with small defaults;
- :mod:`tests.support.cluster`: database versions, real clusters on
  loopback agents, the ``dbtester`` command as a subprocess;
- :mod:`tests.support.data`: synthetic records, trials and results
  directories for the unit tests;
- :mod:`tests.support.phases`: a fault run's steps for the e2e fault tests;
- :mod:`tests.support.graph`: the import-cycle finder of the layer tests;
- :mod:`tests.support.s3`: object stores on loopback (a server run by PID,
  a bucket read without dbtester) and the environment publishing runs in.
"""
