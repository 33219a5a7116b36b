"""Where a results directory is published: ``gs://BUCKET/PREFIX``,
``s3://BUCKET/PREFIX``, ``file:///PATH`` or ``/PATH``, parsed and checked, and
the public URL readers fetch its files from.

A leaf module (it imports only ``dbtester.errors``): the test-case model uses
it to check ``publish.url`` when a test case is loaded.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from dbtester.errors import PublishInputError

__all__ = [
    "PUBLISH_SCHEMES",
    "Destination",
    "clean_url",
    "destination_problem",
    "parse_destination",
    "parse_public_url",
    "public_base",
    "with_scheme",
]

PUBLISH_SCHEMES = ("gs", "s3", "file")
GCS_PUBLIC = "https://storage.googleapis.com"
# What any bucket name is made of. Loose on purpose: it catches a port, a space
# or a typo; the cloud's own stricter rules (which S3 relaxes for old us-east-1
# buckets) are for the cloud to enforce.
BUCKET_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")


@dataclass(frozen=True)
class Destination:
    """Where a results directory goes. ``root`` is the fsspec path below which
    every file lands: ``bucket/prefix`` for buckets, an absolute path for files."""

    url: str
    scheme: str  # "gs" | "s3" | "file"
    bucket: str  # "" for file
    prefix: str  # key prefix without slashes at either end ("" at the bucket's root)
    root: str

    def target(self, rel: str) -> str:
        """The fsspec path of the file at ``rel`` (POSIX, relative) once published."""
        return f"{self.root.rstrip('/')}/{rel}"


def parse_destination(url: str) -> Destination:
    """``gs://BUCKET/PREFIX``, ``s3://BUCKET/PREFIX``, ``file:///PATH`` or ``/PATH``."""
    shown = clean_url(url)
    if url.startswith("/"):
        return _local(url, url)
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in PUBLISH_SCHEMES:
        allowed = ", ".join(f"{s}://" for s in PUBLISH_SCHEMES)
        raise PublishInputError(
            f"unsupported publish URL {shown!r}; use {allowed} or an absolute path"
        )
    parts = urlsplit(url)
    if "@" in parts.netloc:
        raise PublishInputError(
            f"publish URL {shown!r} carries credentials: leave them out; they come from"
            " the environment or the cloud SDK's credential files"
        )
    if parts.query or parts.fragment:
        raise PublishInputError(f"publish URL {shown!r} has a query or fragment; drop it")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise PublishInputError(
                f"publish URL {shown!r}: a file URL names an absolute path, file:///path"
            )
        return _local(url, unquote(parts.path))
    bucket = parts.netloc
    if not bucket:
        raise PublishInputError(
            f"publish URL {shown!r} names no bucket: use {scheme}://BUCKET/PREFIX"
        )
    if not BUCKET_PATTERN.match(bucket):
        raise PublishInputError(
            f"publish URL {shown!r}: {bucket!r} is not a bucket name (letters, digits,"
            " dots, hyphens and underscores)"
        )
    segments = [s for s in parts.path.split("/") if s]
    if any(s in (".", "..") for s in segments):
        raise PublishInputError(f"publish URL {shown!r}: '.' and '..' are not allowed in a prefix")
    prefix = "/".join(segments)
    return Destination(url, scheme, bucket, prefix, f"{bucket}/{prefix}".rstrip("/"))


def _local(url: str, path: str) -> Destination:
    if not path.startswith("/"):
        raise PublishInputError(f"publish path {url!r} must be absolute")
    root = posixpath.normpath(path)
    return Destination(url, "file", "", "", root)


def destination_problem(url: str) -> str | None:
    """Why ``url`` cannot be published to, or None: the test-case model's check."""
    try:
        parse_destination(url)
    except PublishInputError as exc:
        return str(exc)
    return None


def parse_public_url(value: str) -> str:
    """A public base URL (``--public-url``, ``publish.public_url``), without its trailing slash."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PublishInputError(
            f"public URL {clean_url(value)!r} must be an http:// or https:// URL"
        )
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise PublishInputError(
            f"public URL {clean_url(value)!r} must not carry credentials, a query or a fragment"
        )
    return value.rstrip("/")


def public_base(
    dest: Destination, public_url: str | None = None, env: Mapping[str, str] | None = None
) -> str | None:
    """The URL readers fetch ``dest``'s files from, or None where links stay relative.

    gs://B/P: https://storage.googleapis.com/B/P; s3://B/P: https://B.s3.amazonaws.com/P.
    Against an emulator or another S3 endpoint (STORAGE_EMULATOR_HOST,
    AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL) the links point there, path style.
    file:// keeps relative links: the copy is a directory like the original.
    """
    env = os.environ if env is None else env
    if public_url:
        return parse_public_url(public_url)
    if dest.scheme == "gs":
        emulator = env.get("STORAGE_EMULATOR_HOST", "")
        host = with_scheme(emulator) if emulator not in ("", "default") else GCS_PUBLIC
        return _join_url(host, dest.bucket, dest.prefix)
    if dest.scheme == "s3":
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        if endpoint:
            return _join_url(with_scheme(endpoint), dest.bucket, dest.prefix)
        return _join_url(f"https://{dest.bucket}.s3.amazonaws.com", dest.prefix)
    return None


def with_scheme(host: str) -> str:
    # STORAGE_EMULATOR_HOST is often given as host:port, as Google's SDKs accept it.
    return clean_url(host if "://" in host else f"http://{host}")


def _join_url(base: str, *parts: str) -> str:
    return base.rstrip("/") + "".join("/" + quote(p, safe="/") for p in parts if p)


def clean_url(url: str) -> str:
    """``url`` without user info, query or fragment: what may be shown or published."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest = re.split(r"[?#]", rest, maxsplit=1)[0]
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"
