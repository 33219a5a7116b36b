"""Every user-facing error of dbtester, and the exit codes they carry.

Library code raises one of these; the CLI catches :class:`DbtesterError` once,
in ``dbtester.cli.main``, prints its message (no traceback) and exits with its
``exit_code``. Nothing else in the package calls ``sys.exit``, prints an error
or raises a click exception.

The hierarchy::

    DbtesterError                 exit 1   an error the user can act on
    ├── RunFailedError            exit 1   a database or agent failed; results kept
    ├── RegressionError           exit 1   `compare`: a metric got significantly worse
    ├── AgentError                exit 1   a call to an agent failed (names the agent)
    ├── MemberError               exit 1   an agent could not start/stop a member
    ├── RemoteError               exit 1   SSH deployment on a host failed (names it)
    ├── BadInputError             exit 2   bad input: an option, a file, a directory
    │   ├── ConfigError           exit 2   a malformed test case (every problem, located)
    │   ├── InstallError          exit 2   no way to obtain a database binary
    │   ├── PublishInputError     exit 2   a publish URL or directory that cannot be used
    │   ├── EnvironmentsDifferError exit 2 `compare`: the runs' machines differ; no verdict
    │   └── ResultsError          exit 2   a results directory that cannot be read
    │       └── SchemaVersionError exit 2  ...written by a newer dbtester
    ├── PublishError              exit 3   upload failed; the local results are complete
    ├── NotLocatedError           exit 4   `bisect`: no version named (see its message)
    └── InterruptedRunError       exit 130 Ctrl-C; partial results kept

Exit codes: 0 success, 1 the run failed (or `compare` found a regression),
2 bad input, 3 publishing failed, 4 `bisect` located nothing (the change did
not reproduce, or a step stayed undecided), 130 interrupted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_LOCATED",
    "EXIT_OK",
    "EXIT_PUBLISH_FAILED",
    "EXIT_RUN_FAILED",
    "AgentError",
    "BadInputError",
    "ConfigError",
    "DbtesterError",
    "EnvironmentsDifferError",
    "InstallError",
    "InterruptedRunError",
    "MemberError",
    "NotLocatedError",
    "Problem",
    "PublishError",
    "PublishInputError",
    "RegressionError",
    "RemoteError",
    "ResultsError",
    "RunFailedError",
    "SchemaVersionError",
]

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_PUBLISH_FAILED = 3
EXIT_NOT_LOCATED = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


class DbtesterError(Exception):
    """An error the user can act on; its message is shown as is, without a traceback."""

    exit_code = EXIT_RUN_FAILED


class RunFailedError(DbtesterError):
    """Some database failed; its results and the others' are still on disk."""


class RegressionError(DbtesterError):
    """``dbtester compare``: a metric got significantly worse by more than the
    threshold; the comparison itself was printed."""


class InterruptedRunError(DbtesterError):
    """The user pressed Ctrl-C; what ran so far is kept and rendered."""

    exit_code = EXIT_INTERRUPTED


class AgentError(DbtesterError):
    """A call to an agent failed; the message names the agent and the reason.
    ``status`` is the gRPC status name (e.g. "UNAVAILABLE") when there was one."""

    def __init__(self, address: str, reason: str, status: str = "") -> None:
        super().__init__(f"agent {address}: {reason}")
        self.address = address
        self.status = status


class MemberError(DbtesterError):
    """An agent could not start or stop a database member; the message says why."""


class RemoteError(DbtesterError):
    """Something on a server machine failed; the message names the host."""


class BadInputError(DbtesterError):
    """Bad input: a command-line value, a file or a directory dbtester cannot use."""

    exit_code = EXIT_BAD_INPUT


class EnvironmentsDifferError(BadInputError):
    """Two runs measured on different machines: no verdict can be given (a
    gate must neither pass nor fail on it) unless asked for across them."""


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


class ConfigError(BadInputError):
    """A test case (or another input file) is malformed; every problem found is
    kept in ``problems``. The message is the problem itself when there is one,
    else a list (the first :attr:`SHOWN` of them, so that no input can make it
    endless)."""

    SHOWN = 25

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems)
        count = len(self.problems)
        if count == 1:
            super().__init__(str(self.problems[0]))
            return
        lines = [f"  {p}" for p in self.problems[: self.SHOWN]]
        if count > self.SHOWN:
            lines.append(f"  ... and {count - self.SHOWN} more")
        super().__init__(f"{count} errors in test case:\n" + "\n".join(lines))


class InstallError(BadInputError):
    """A database binary cannot be had; the message lists every way that was tried."""


class PublishInputError(BadInputError):
    """The URL, the public URL or the directory cannot be published."""


class ResultsError(BadInputError):
    """A results directory, or a file in it, cannot be read; the message names the path."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)


class SchemaVersionError(ResultsError):
    """A results file was written by a newer dbtester than this one can read."""

    def __init__(self, path: Path | str, found: int, supported: int) -> None:
        super().__init__(
            path,
            f"schema version {found} is newer than this dbtester reads (up to {supported});"
            " upgrade dbtester to read it",
        )
        self.found = found
        self.supported = supported


class NotLocatedError(DbtesterError):
    """``dbtester bisect`` named no version: the two ends do not differ
    decidedly (the change did not reproduce), or a step stayed undecided at
    its trial budget. The message gives the figures and the range left."""

    exit_code = EXIT_NOT_LOCATED


class PublishError(DbtesterError):
    """Uploading a results directory failed; the local results are complete and
    the message names the command that finishes the upload."""

    exit_code = EXIT_PUBLISH_FAILED
