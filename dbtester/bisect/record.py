"""``bisect.json``: what a bisect folder is for, and what each step found.

The folder belongs to one question: one test case (by the digest of its
text), one database kind and one metric. Any ends within it may be bisected;
a step already run, for the same pair of versions, is read back instead of
run again. Typed, frozen and versioned like the results files: a reader
refuses a newer schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from dbtester.errors import BadInputError, ResultsError, SchemaVersionError

__all__ = [
    "BISECT_FILE",
    "BISECT_SCHEMA",
    "BisectRecord",
    "StepRecord",
    "check_same_question",
    "read",
    "write",
]

BISECT_FILE = "bisect.json"
BISECT_SCHEMA = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StepRecord(_Frozen):
    """One version against the good end."""

    version: str
    baseline: str  # the good end's version
    changed: str  # search.Changed's value, as the step's ends made it
    state: str = "failed"  # the look's: different, equivalent, open; or failed
    folder: str | None = None  # the step's results directory, relative to the bisect folder
    verdict: str = ""  # faster slower more less, equivalent, undecided
    change_pct: float | None = None
    low_pct: float | None = None  # the sequential look's interval
    high_pct: float | None = None
    p_value: float | None = None  # Welch's test over the step's trials
    trials: int = 0
    value: float | None = None  # the metric's mean over this version's trials
    baseline_value: float | None = None  # and over the good end's in the same step
    error: str | None = None  # why a failed version was skipped


class BisectRecord(_Frozen):
    schema_version: int = BISECT_SCHEMA
    config_sha256: str
    kind: str
    metric: str
    good: str = ""
    bad: str = ""
    versions: tuple[str, ...] = ()  # the range, the good end first
    steps: tuple[StepRecord, ...] = ()  # in the order they were run or read
    result: str = ""  # one line: what the bisect concluded


def read(folder: Path) -> BisectRecord | None:
    """The folder's record, None where there is none yet."""
    path = folder / BISECT_FILE
    try:
        data: Any = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ResultsError(path, f"cannot be read: {exc}") from None
    found = data.get("schema_version") if isinstance(data, dict) else None
    if not isinstance(found, int):
        raise ResultsError(path, "not a bisect record (no schema_version)")
    if found > BISECT_SCHEMA:
        raise SchemaVersionError(path, found, BISECT_SCHEMA)
    try:
        return BisectRecord.model_validate(data)
    except ValidationError as exc:
        raise ResultsError(path, f"not a bisect record: {exc.errors()[0]['msg']}") from None


def write(folder: Path, record: BisectRecord) -> None:
    """Written aside and renamed: an interrupted write leaves the old record."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{BISECT_FILE}.partial"
    partial.write_text(json.dumps(record.model_dump(mode="json"), indent=2) + "\n")
    partial.replace(folder / BISECT_FILE)


def check_same_question(record: BisectRecord, wanted: BisectRecord, folder: Path) -> None:
    """A folder holds one question's steps: refuse another's."""
    for name in ("config_sha256", "kind", "metric"):
        if getattr(record, name) != getattr(wanted, name):
            what = "test case" if name == "config_sha256" else name
            raise BadInputError(
                f"{folder} holds a bisect of another {what}"
                f" ({record.kind}, {record.metric}); choose another --out"
            )
