"""The one user-facing error type, and its exit codes.

Library code raises :class:`DbtesterError` (or a subclass); the CLI catches it
once, prints its message and exits with its ``exit_code``. Nothing else in the
package calls ``sys.exit``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_PUBLISH_FAILED",
    "EXIT_RUN_FAILED",
    "ConfigError",
    "DbtesterError",
    "InstallError",
    "Problem",
    "PublishError",
]

EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_PUBLISH_FAILED = 3


class DbtesterError(Exception):
    """An error the user can act on; its message is shown as is, without a traceback."""

    exit_code = EXIT_RUN_FAILED


@dataclass(frozen=True, order=True)
class Problem:
    """One finding in an input file, located as ``file:line:column`` (1-based)."""

    file: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        if self.line <= 0:
            return f"{self.file}: {self.message}"
        return f"{self.file}:{self.line}:{self.column}: {self.message}"


class ConfigError(DbtesterError):
    """A test case (or another input file) is malformed; every problem found is listed."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems)
        count = len(self.problems)
        head = "1 error" if count == 1 else f"{count} errors"
        super().__init__(f"{head} in test case:\n" + "\n".join(f"  {p}" for p in self.problems))


class InstallError(DbtesterError):
    """A database binary cannot be had; the message lists every way that was tried."""

    exit_code = EXIT_BAD_INPUT


class PublishError(DbtesterError):
    """Uploading a results directory failed; the local results are complete and
    the message names the command that finishes the upload."""

    exit_code = EXIT_PUBLISH_FAILED
