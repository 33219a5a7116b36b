"""The halving itself, pure: which version to try next, given what the steps
so far found, and when it is over.

The steps' findings are replayed from the start every time, so a bisect that
was interrupted and is run again walks the same path through the versions it
already tried and goes on where it stopped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "Changed",
    "Found",
    "NotReproduced",
    "Stuck",
    "Try",
    "between",
    "is_release",
    "next_step",
    "steps_left",
    "version_key",
]


class Changed(Enum):
    """What one version's step found, against the good end."""

    YES = "changed"  # differs from the good end the way the bad end does
    NO = "unchanged"  # equivalent, or different the other way
    UNDECIDED = "undecided"  # the trial budget ended first
    FAILED = "failed"  # it did not install or run: skipped


@dataclass(frozen=True)
class Try:
    """Run the step for ``version`` next."""

    version: str
    low: str  # the range still open, its ends
    high: str
    left: int  # versions strictly between low and high not yet skipped


@dataclass(frozen=True)
class Found:
    """``first`` is the first version with the change; ``last_without`` the
    newest before it without; ``skipped`` those between that could not run
    (the change may have come in one of them)."""

    first: str
    last_without: str
    skipped: tuple[str, ...]


@dataclass(frozen=True)
class NotReproduced:
    """The bad end does not differ from the good end (or not decidedly)."""

    bad: Changed


@dataclass(frozen=True)
class Stuck:
    """``version``'s step stayed undecided: the change is between ``low`` and
    ``high``, not located further."""

    version: str
    low: str
    high: str


Decision = Try | Found | NotReproduced | Stuck

_RELEASE = re.compile(r"^\d+(\.\d+)*$")


def is_release(version: str) -> bool:
    """Numbers and dots only: no pre-release (``-rc.0``), no pseudo-version."""
    return bool(_RELEASE.match(version))


def version_key(version: str) -> tuple[int, ...]:
    """The order of releases: 3.5.9 before 3.5.10."""
    return tuple(int(part) for part in version.split("."))


def between(versions: Iterable[str], good: str, bad: str) -> list[str]:
    """``good``, the releases strictly between, and ``bad``, oldest first;
    pre-releases and duplicates dropped."""
    low, high = version_key(good), version_key(bad)
    inside = {v for v in versions if is_release(v) and low < version_key(v) < high}
    return [good, *sorted(inside, key=version_key), bad]


def next_step(versions: Sequence[str], found: Mapping[str, Changed]) -> Decision:
    """What to do next over ``versions`` (the good end first, the bad end last),
    given each step's finding so far. The bad end is tried first: the change
    must reproduce before it is looked for."""
    bad = versions[-1]
    if bad not in found:
        return Try(bad, versions[0], bad, len(versions) - 2)
    if found[bad] is not Changed.YES:
        return NotReproduced(found[bad])
    low, high = 0, len(versions) - 1
    while True:
        open_ = [i for i in range(low + 1, high) if found.get(versions[i]) is not Changed.FAILED]
        if not open_:
            skipped = tuple(versions[low + 1 : high])
            return Found(versions[high], versions[low], skipped)
        middle = (low + high) / 2
        index = min(open_, key=lambda i: (abs(i - middle), i))
        version = versions[index]
        if version not in found:
            return Try(version, versions[low], versions[high], len(open_))
        result = found[version]
        if result is Changed.UNDECIDED:
            return Stuck(version, versions[low], versions[high])
        if result is Changed.YES:
            high = index
        else:
            low = index


def steps_left(left: int) -> int:
    """How many more steps halve ``left`` untried versions down to none."""
    return math.ceil(math.log2(left + 1)) if left > 0 else 0
