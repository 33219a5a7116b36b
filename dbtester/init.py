"""``dbtester init``: a starter test case that validates as written, with a
comment on each section saying what it is and where to read more.

Nothing is asked: every choice is an option (the databases, the hosts), so
the command works the same in a terminal, a script and CI. The text is
checked by the real loader before it is returned: a starter that would not
validate is never written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from dbtester.config import load_test_case_text
from dbtester.config.model import HOST_PATTERN, MAX_MEMBERS
from dbtester.databases import KINDS
from dbtester.errors import BadInputError, DbtesterError

__all__ = ["DEFAULT_TARGETS", "DOCS", "parse_hosts", "starter_test_case", "write_starter"]

#: one etcd at the newer of the two versions configs/quickstart.yaml compares
#: (a unit test keeps the two in step)
DEFAULT_TARGETS: tuple[tuple[str, str], ...] = (("etcd", "3.6.8"),)

#: where every key of a test case is described
DOCS = "docs/test-cases.md"

_ID_MAX = 64


def parse_hosts(text: str) -> tuple[str, ...]:
    """``--hosts A,B,C``: the addresses, each once."""
    example = "e.g. --hosts 10.0.0.1,10.0.0.2,10.0.0.3"
    hosts = tuple(part.strip() for part in text.split(","))
    if not all(hosts):
        raise BadInputError(f"--hosts {text!r} has an empty address; {example}")
    bad = [h for h in hosts if not re.match(HOST_PATTERN, h)]
    if bad:
        raise BadInputError(
            f"--hosts: {', '.join(map(repr, bad))} is not a host name or IP address; {example}"
        )
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    if twice:
        raise BadInputError(f"--hosts names {', '.join(twice)} more than once; {example}")
    if len(hosts) > MAX_MEMBERS:
        raise BadInputError(
            f"--hosts names {len(hosts)} hosts; a cluster has at most {MAX_MEMBERS}"
        )
    return hosts


def _ids(targets: Sequence[tuple[str, str]]) -> list[str]:
    """A column id per database: ``<kind>-v<version>`` in the characters ids
    allow, made unique (two versions may differ only in case)."""
    ids: list[str] = []
    for kind, version in targets:
        base = re.sub(r"[^a-z0-9._-]", "-", f"{kind}-v{version}".lower())[:_ID_MAX]
        found, n = base, 2
        while found in ids:
            suffix = f"-{n}"
            found, n = base[: _ID_MAX - len(suffix)] + suffix, n + 1
        ids.append(found)
    return ids


def _quoted(value: str) -> str:
    # A JSON string is a YAML double-quoted scalar: a version such as 3.10 stays
    # a string and an IPv6 address needs no further escaping.
    return json.dumps(value)


_HEADER = f"""\
# A dbtester test case, written by `dbtester init`. Every database below runs
# the same workload, one after another, and the results table compares them.
#   check it:  dbtester validate FILE
#   run it:    dbtester run FILE
# Every key (and its default) is described in {DOCS}.
"""

_WORKLOAD = f"""\
# workload: what the load generator does against each database. type is
# write, read or mixed (YCSB-like); a database may override any key under its
# own `workload:`. See {DOCS}.
workload:
  type: write
  requests: 20000        # requests in the measured load
  key_size: 256          # bytes
  value_size: 1024       # bytes
  sequential_keys: true
  clients: 100           # concurrent clients ...
  connections: 10        # ... sharing this many connections

# repeat: trials per database, interleaved, each on a fresh cluster. With 3 or
# more, every figure gets a 95% interval and every difference a verdict;
# `auto` runs trials until the differences are decided. See {DOCS}.
repeat: 1
"""

_DATABASES_LOCAL = f"""\
# databases: one column of the results table each, run in this order: a kind
# ({", ".join(KINDS)}) at a version, installed on first use (or beforehand
# with `dbtester install --for FILE`). Without `hosts:` the members run on
# this machine. See {DOCS}.
databases:
"""

_DATABASES_HOSTS = f"""\
# databases: one column of the results table each, run in this order: a kind
# ({", ".join(KINDS)}) at a version. `hosts:` are the server machines, one
# member on each; each runs an agent (`dbtester agent serve`), which
# `dbtester agents up FILE` installs and starts over SSH. See {DOCS}.
databases:
"""


def _database(db_id: str, kind: str, version: str, hosts: Sequence[str]) -> str:
    lines = [
        f"  - id: {db_id}",
        f"    kind: {kind}",
        f"    version: {_quoted(version)}",
    ]
    most = KINDS[kind].max_members or len(hosts) or 3  # a kind may take fewer
    if hosts:
        lines.append("    hosts:")
        lines += [f"      - address: {_quoted(h)}" for h in hosts[:most]]
    else:
        lines.append(f"    members: {min(3, most)}")
    return "\n".join(lines) + "\n"


def starter_test_case(targets: Sequence[tuple[str, str]] = (), hosts: Sequence[str] = ()) -> str:
    """The YAML text of a starter test case comparing ``targets`` (kind,
    version; :data:`DEFAULT_TARGETS` when empty), their members on ``hosts``
    when given, else on this machine. ConfigError if it would not validate (a
    version the model refuses)."""
    unknown = sorted({kind for kind, _ in targets if kind not in KINDS})
    if unknown:
        raise BadInputError(f"unknown kind {', '.join(unknown)}; allowed: {', '.join(KINDS)}")
    chosen = list(dict.fromkeys(targets or DEFAULT_TARGETS))
    names = " vs ".join(f"{kind} {version}" for kind, version in chosen)
    where = f"one member on each of {', '.join(hosts)}" if hosts else "3 members on this machine"
    top = (
        f"title: {_quoted(f'Starter - write 20K keys, {names}')}\n"
        f"description: {_quoted(f'Written by dbtester init: {names}, {where}.')}\n"
    )
    databases = "".join(
        _database(db_id, kind, version, hosts)
        for db_id, (kind, version) in zip(_ids(chosen), chosen, strict=True)
    )
    text = "\n".join(
        [
            _HEADER,
            "# title, description: the results table's and README's heading.\n" + top,
            _WORKLOAD,
            (_DATABASES_HOSTS if hosts else _DATABASES_LOCAL) + databases,
        ]
    )
    load_test_case_text(text, "<dbtester init>")  # raises ConfigError, located
    return text


def write_starter(path: Path, text: str, force: bool) -> None:
    """Write ``text`` to ``path`` (its folder made if missing); an existing
    file only with ``force``."""
    if path.is_dir():
        raise BadInputError(f"{path} is a directory; --out names the file to write")
    if path.exists() and not force:
        raise BadInputError(f"{path} exists; pass --force to overwrite it")
    try:
        # a folder named for the file is made, as every --out makes its own
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:  # a full disk reports no file name of its own
        raise DbtesterError(f"{path}: cannot write: {exc.strerror or exc}") from None
