"""Fuzz harnesses (``pytest -m fuzz``; ``make fuzz`` runs each for 10 minutes):
Hypothesis against every surface that reads what a user or a network peer
sends. See ``tests/fuzz/README.md``."""
