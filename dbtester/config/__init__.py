"""Test cases: the typed model, the strict loader and the original format's converter."""

from dbtester.config.load import Loaded, load_test_case, load_test_case_text, parse_test_case
from dbtester.config.model import DatabaseSpec, Host, Publish, TestCase, Workload

__all__ = [
    "DatabaseSpec",
    "Host",
    "Loaded",
    "Publish",
    "TestCase",
    "Workload",
    "load_test_case",
    "load_test_case_text",
    "parse_test_case",
]
