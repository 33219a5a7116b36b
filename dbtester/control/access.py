"""How dbtester reaches a database's members: in plaintext, over TLS with
certificates made for the run (``tls: true`` on members it starts), or with
the files a test case names for its own ``endpoints``; and as which user
(``auth``), its secret read from the environment or a file at the start.

The run's CA lives in memory only; the load's client certificate and key
are written to the trial's scratch folder (readable by this user alone),
never into the results."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dbtester.config.model import DatabaseSpec
from dbtester.config.model import TlsFiles as TlsKeys
from dbtester.databases.base import PLAIN, Access, AuthKeys, MemberTls, Peer, TlsFiles
from dbtester.errors import DbtesterError
from dbtester.util.certs import RunAuthority
from dbtester.util.paths import write_private

__all__ = ["MembersAccess", "endpoint_access", "issue", "members_access"]


@dataclass(frozen=True)
class MembersAccess:
    """Members dbtester starts: how its clients reach them (``access``) and
    each member's own TLS identity (``identities[i]``; empty: plaintext)."""

    access: Access = PLAIN
    identities: tuple[MemberTls, ...] = ()

    def identity(self, member: int) -> MemberTls | None:
        return self.identities[member] if self.identities else None


def members_access(db: DatabaseSpec, peers: Sequence[Peer], folder: Path) -> MembersAccess:
    """With ``tls: true``: a CA for this run, an identity for each member
    (good for its host and loopback), and the client's, written to ``folder``;
    with ``auth``, the user and its secret."""
    made = issue(db.id, peers, folder) if db.tls is True else MembersAccess()
    return replace(made, access=_as_user(db, made.access))


def _as_user(db: DatabaseSpec, access: Access) -> Access:
    """``access`` as the test case's ``auth`` user, its secret read from
    where the test case says (unchanged without ``auth``)."""
    if not isinstance(db.auth, AuthKeys):
        return access
    key, where = db.auth.source
    if key.endswith("_env"):
        secret = os.environ.get(where)
        if not secret:
            raise DbtesterError(f"{db.id}: auth.{key}: ${where} is not set")
    else:
        try:
            lines = Path(where).read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise DbtesterError(f"{db.id}: auth.{key} {where}: {exc}") from None
        secret = lines[0] if lines else ""
        if not secret:
            raise DbtesterError(f"{db.id}: auth.{key} {where} is empty")
    return replace(access, user=db.auth.who, secret=secret)


def issue(label: str, peers: Sequence[Peer], folder: Path) -> MembersAccess:
    """A CA named for ``label``, an identity for each of ``peers`` and the
    client's, written to ``folder``."""
    authority = RunAuthority(label)
    identities = tuple(
        MemberTls(**vars(authority.issue(f"{label}-{peer.name}", [peer.host]))) for peer in peers
    )
    client = authority.issue("dbtester")
    folder.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(
        ca=write_private(folder / "ca.pem", client.ca),
        cert=write_private(folder / "client.pem", client.cert),
        key=write_private(folder / "client-key.pem", client.key),
    )
    return MembersAccess(Access(tls=files), identities)


def endpoint_access(db: DatabaseSpec) -> Access:
    """A test case's own cluster: the files its ``tls`` names, each one read
    once here so that a missing or unreadable file fails the database at the
    start, naming the key."""
    if not isinstance(db.tls, TlsKeys):
        return _as_user(db, PLAIN)
    keys = db.tls
    for name in ("ca", "cert", "key"):
        path = getattr(keys, name)
        if path is None:
            continue
        try:
            text = Path(path).read_bytes()
        except OSError as exc:
            raise DbtesterError(f"{db.id}: tls.{name} {path}: {exc.strerror}") from None
        if b"-----BEGIN " not in text:
            raise DbtesterError(f"{db.id}: tls.{name} {path} holds no PEM text")
    files = TlsFiles(
        ca=Path(keys.ca),
        cert=Path(keys.cert) if keys.cert else None,
        key=Path(keys.key) if keys.key else None,
        server_name=keys.server_name,
    )
    return _as_user(db, Access(tls=files))
