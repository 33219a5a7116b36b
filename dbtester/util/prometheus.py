"""Read a few gauges from a server's Prometheus text endpoint (``/metrics``).

Only plain samples without labels are looked for, by exact name, each found
by a search of the reply's bytes: the agent's sampler reads two of etcd's
each second out of about 150 KB, and a parser of the whole format
(prometheus_client's) would build every family of its ~2,000 lines to
return two numbers.
"""

from __future__ import annotations

import http.client
import urllib.request
from collections.abc import Collection

__all__ = ["gauges", "read_gauges"]


def gauges(text: bytes, names: Collection[str]) -> dict[str, float]:
    """The values of the unlabelled samples ``names`` in the exposition
    ``text``; a name it does not hold is left out."""
    found: dict[str, float] = {}
    padded = b"\n" + text
    for name in names:
        at = padded.find(b"\n" + name.encode() + b" ")
        if at < 0:
            continue
        end = padded.find(b"\n", at + 1)
        line = padded[at + 1 : end if end >= 0 else None]
        try:
            found[name] = float(line.split()[1])
        except (IndexError, ValueError):
            continue  # a line without a value, or a value that is no number
    return found


def read_gauges(url: str, names: Collection[str], timeout: float) -> dict[str, float]:
    """:func:`gauges` of what ``url`` serves; OSError when it does not
    answer in ``timeout`` seconds or answers with an error."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            text = reply.read()
    except http.client.HTTPException as exc:  # cut short (IncompleteRead), not an OSError
        raise OSError(f"{url}: {exc!r}") from exc
    return gauges(text, names)
