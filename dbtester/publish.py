"""``dbtester publish``: copy a results directory to a bucket, or to another directory.

Every file goes to ``URL/<its path relative to the results directory>``, one
file at a time to a key decided here. fsspec's recursive ``put`` of a
directory decides keys itself and nests a folder (``URL/<dir name>/...``)
when the destination already exists, so publishing twice would not give the
same layout. The README is the one file that changes on the way: its relative
chart links become the bucket's public URLs, so the published copy shows its
charts wherever it is read. The local directory is only ever read.

``gs://`` goes through gcsfs, ``s3://`` through s3fs (both imported only when
used), ``file://`` and absolute paths through fsspec's local filesystem.
Credentials are whatever those libraries find (environment variables,
credential files, instance metadata); dbtester never reads them, and every
message about a failure is scrubbed of URL query strings, user info and the
values of credential variables before it is shown.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import mimetypes
import os
import posixpath
import re
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote, unquote, urlsplit

import click

from dbtester.config.model import PUBLISH_SCHEMES
from dbtester.errors import EXIT_BAD_INPUT, DbtesterError, PublishError

__all__ = [
    "ATTEMPTS",
    "Destination",
    "PublishInputError",
    "Published",
    "Upload",
    "content_type",
    "destination_problem",
    "parse_destination",
    "parse_public_url",
    "plan_uploads",
    "public_base",
    "publish",
    "published_readme",
    "retry_command",
    "sanitize",
]

ATTEMPTS = 3  # per file; then the upload stops and says how to resume it
BACKOFF_S = 1.0  # before the 2nd attempt; doubles after each failure
# One attempt at one file may take this long, plus the time the file needs at
# MIN_RATE. Against a dead endpoint gcsfs retries on its own for ~34 s and
# botocore waits forever for a "100 Continue" from a server that accepted the
# connection but never answers; this deadline is what bounds both.
DEADLINE_S = 8.0
MIN_RATE = 250_000  # bytes/s (2 Mbit/s): big files get time in proportion
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
PROGRESS_EVERY_S = 5.0  # when not on a terminal
# Uploaded last, in this order: a reader who finds result.json in the bucket
# finds everything the README links to.
INDEX_FILES = ("README.md", "result.json")
README = "README.md"
GCS_PUBLIC = "https://storage.googleapis.com"
# What any bucket name is made of. Loose on purpose: it catches a port, a space
# or a typo; the cloud's own stricter rules (which S3 relaxes for old us-east-1
# buckets) are for the cloud to enforce.
BUCKET_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
# Content types browsers display instead of downloading (mimetypes knows no
# .log or .yaml here); text is UTF-8 throughout a results directory.
EXTRA_TYPES = {".log": "text/plain", ".yaml": "text/plain", ".md": "text/markdown"}


class PublishInputError(DbtesterError):
    """The URL, the public URL or the directory cannot be published: bad input (exit 2)."""

    exit_code = EXIT_BAD_INPUT


# --------------------------------------------------------------------------- destinations


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
    shown = _clean_url(url)
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
            f"public URL {_clean_url(value)!r} must be an http:// or https:// URL"
        )
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise PublishInputError(
            f"public URL {_clean_url(value)!r} must not carry credentials, a query or a fragment"
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
        host = _with_scheme(emulator) if emulator not in ("", "default") else GCS_PUBLIC
        return _join_url(host, dest.bucket, dest.prefix)
    if dest.scheme == "s3":
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        if endpoint:
            return _join_url(_with_scheme(endpoint), dest.bucket, dest.prefix)
        return _join_url(f"https://{dest.bucket}.s3.amazonaws.com", dest.prefix)
    return None


def _with_scheme(host: str) -> str:
    # STORAGE_EMULATOR_HOST is often given as host:port, as Google's SDKs accept it.
    return _clean_url(host if "://" in host else f"http://{host}")


def _join_url(base: str, *parts: str) -> str:
    return base.rstrip("/") + "".join("/" + quote(p, safe="/") for p in parts if p)


def _clean_url(url: str) -> str:
    """``url`` without user info, query or fragment: what may be shown or published."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest = re.split(r"[?#]", rest, maxsplit=1)[0]
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"


# --------------------------------------------------------------------------- the README

# An inline link or image, [text](target) or ![alt](target "title"), and a
# reference definition, [name]: target.
_INLINE = re.compile(r"(!?\[[^\]\n]*\]\()([^()\s]+)((?:\s+\"[^\"\n]*\")?\))")
_REFERENCE = re.compile(r"^( {0,3}\[[^\]\n]+\]:[ \t]*)(\S+)")
_HAS_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def published_readme(text: str, base: str | None) -> str:
    """The README as published: every relative link target below the results
    directory becomes ``base/target``. Text in fenced code blocks (the table)
    and absolute links are left alone; ``base=None`` returns ``text`` as is."""
    if base is None:
        return text
    lines, fenced = [], False
    for line in text.splitlines(keepends=True):
        out = line
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            out = _INLINE.sub(lambda m: m[1] + _absolute(m[2], base) + m[3], out)
            out = _REFERENCE.sub(lambda m: m[1] + _absolute(m[2], base), out)
        lines.append(out)
    return "".join(lines)


def _absolute(target: str, base: str) -> str:
    if _HAS_SCHEME.match(target) or target.startswith(("/", "#", "?")):
        return target
    path = posixpath.normpath(target)
    if path == ".." or path.startswith("../"):
        return target  # outside the results directory: not published, nothing to point at
    return f"{base}/" if path == "." else f"{base}/{path}"


# --------------------------------------------------------------------------- what goes where


@dataclass(frozen=True)
class Upload:
    rel: str  # POSIX path relative to the results directory: the key below the URL
    local: Path
    size: int


def plan_uploads(directory: Path) -> list[Upload]:
    """Every regular file below ``directory``, sorted by path, README.md and
    result.json last. Directory symlinks are not followed."""
    found = []
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in names:
            path = Path(root, name)
            if path.is_file():
                rel = path.relative_to(directory).as_posix()
                found.append(Upload(rel, path, path.stat().st_size))

    def order(item: Upload) -> tuple[int, str]:
        return (INDEX_FILES.index(item.rel) if item.rel in INDEX_FILES else -1, item.rel)

    return sorted(found, key=order)


def content_type(rel: str) -> str:
    suffix = posixpath.splitext(rel)[1].lower()
    kind = EXTRA_TYPES.get(suffix) or mimetypes.guess_type(rel)[0] or "application/octet-stream"
    return f"{kind}; charset=utf-8" if kind.startswith("text/") else kind


# --------------------------------------------------------------------------- messages

_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|ACCESS_KEY|API_KEY", re.I)
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"<>]*@")
_QUERY = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s?#'\"<>]*)[?#][^\s'\"<>]*")
_SIGNED = re.compile(
    r"\b(X-Amz-[A-Za-z-]+|X-Goog-[A-Za-z-]+|Signature|AWSAccessKeyId|access_token|Credential)"
    r"=[^&\s'\"]+",
    re.I,
)


def sanitize(message: str, env: Mapping[str, str] | None = None) -> str:
    """``message`` fit to show: URLs lose user info and query strings (signed
    URLs carry their signature there), signing parameters are masked, and so
    is the value of every environment variable named like a credential."""
    env = os.environ if env is None else env
    text = _USERINFO.sub(r"\1", message)
    text = _QUERY.sub(r"\1", text)
    text = _SIGNED.sub(lambda m: f"{m[1]}=***", text)
    for name, value in env.items():
        if len(value) >= 6 and _SECRET_NAME.search(name) and value in text:
            text = text.replace(value, "***")
    return text


def retry_command(directory: Path | str, url: str, public_url: str | None = None) -> str:
    words = ["dbtester", "publish", str(directory), url]
    if public_url:
        words += ["--public-url", public_url]
    return shlex.join(words)


def _reason(exc: BaseException, deadline: float, bucket: bool, cause: str = "") -> str:
    if isinstance(exc, TimeoutError):  # fsspec's FSTimeoutError is one
        last = f" (last error: {sanitize(cause)[:300]})" if cause else ""
        return f"no answer within {deadline:.0f} s{last}"
    lines = str(exc).strip().splitlines()
    text = sanitize(lines[0] if lines else type(exc).__name__)
    text = text if len(text) <= 300 else text[:297] + "..."
    if isinstance(exc, PermissionError):
        return f"{text} (permission denied: check the credentials and the bucket's permissions)"
    if isinstance(exc, FileNotFoundError) and bucket and "bucket" not in text.lower():
        return f"{text} (not found: does the bucket exist?)"
    return text


# --------------------------------------------------------------------------- publishing


@dataclass(frozen=True)
class Published:
    url: str
    files: int
    size: int  # bytes sent
    seconds: float
    readme: str  # where the published README is read: its public URL, or its path


def publish(
    directory: Path,
    url: str,
    *,
    public_url: str | None = None,
    progress: TextIO | None = None,
    quiet: bool = False,
    attempts: int = ATTEMPTS,
    deadline_s: float = DEADLINE_S,
) -> Published:
    """Upload every file of the results ``directory`` to ``url``; idempotent
    (a second call overwrites the same keys). Progress goes to ``progress``
    (stderr) unless ``quiet``. Raises PublishInputError (exit 2) for bad input
    and PublishError (exit 3) when an upload fails, naming the file, the reason
    and the command that completes the upload."""
    dest = parse_destination(url)
    base = public_base(dest, public_url)
    _check_source(directory, dest)
    items = plan_uploads(directory)
    readme = _readme_bytes(directory, base)
    sizes = [len(readme) if i.rel == README and readme is not None else i.size for i in items]
    total = sum(sizes)
    stream = None if quiet else (progress or sys.stderr)
    bar = _Progress(stream, len(items), total, _clean_url(url))
    with _LibraryLog() as log:
        try:
            fs = _filesystem(dest)
        except Exception as exc:
            reason = _reason(exc, deadline_s, bool(dest.bucket))
            raise _failure(directory, url, public_url, f"before any upload: {reason}") from None
        for done, (item, size) in enumerate(zip(items, sizes, strict=True)):
            data = readme if item.rel == README else None
            deadline = deadline_s + size / MIN_RATE
            log.last = ""
            try:
                _with_retries(functools.partial(_put, fs, dest, item, data, deadline), attempts)
            except _GaveUpError as exc:
                bar.abandon()
                reason = _reason(exc.cause, deadline, bool(dest.bucket), log.last)
                tries = f"{exc.attempts} attempt{'s' if exc.attempts != 1 else ''}"
                what = f"at {item.rel} ({tries}): {reason}\n{done} of {len(items)} files went up"
                raise _failure(directory, url, public_url, what) from None
            bar.advance(size)
    seconds = bar.finish()
    where = f"{base}/{README}" if base else dest.target(README)
    return Published(_clean_url(url), len(items), total, seconds, where)


def _failure(directory: Path, url: str, public_url: str | None, what: str) -> PublishError:
    return PublishError(
        f"publishing {directory} to {_clean_url(url)} failed {what};"
        f" the local results in {directory} are intact.\n"
        f"Retry with: {retry_command(directory, url, public_url)}"
    )


def _check_source(directory: Path, dest: Destination) -> None:
    if not (directory / "result.json").is_file():
        raise PublishInputError(
            f"{directory} is not a results directory (it has no result.json);"
            " publish the directory `dbtester run` wrote"
        )
    if dest.scheme == "file":
        source, target = directory.resolve(), Path(dest.root).resolve()
        if target == source or source in target.parents:
            raise PublishInputError(
                f"cannot publish {directory} into itself ({dest.root}): the local results"
                " are never written to"
            )


def _readme_bytes(directory: Path, base: str | None) -> bytes | None:
    """The published README's bytes, or None when the local file goes as it is."""
    path = directory / README
    if base is None or not path.is_file():
        return None
    # surrogateescape: bytes that are not UTF-8 go out exactly as they came in.
    text = path.read_bytes().decode("utf-8", "surrogateescape")
    return published_readme(text, base).encode("utf-8", "surrogateescape")


class _GaveUpError(Exception):
    def __init__(self, attempts: int, cause: Exception) -> None:
        super().__init__(str(cause))
        self.attempts = attempts
        self.cause = cause


def _with_retries(action: Callable[[], None], attempts: int) -> None:
    """Run ``action`` until it succeeds, at most ``attempts`` times, backing off
    exponentially; raise _GaveUpError with the last failure."""
    for attempt in range(1, attempts + 1):
        try:
            action()
            return
        except (FileNotFoundError, PermissionError) as exc:
            # A missing bucket or a refusal does not heal by waiting.
            raise _GaveUpError(attempt, exc) from exc
        except Exception as exc:
            if attempt >= attempts:
                raise _GaveUpError(attempt, exc) from exc
            time.sleep(BACKOFF_S * 2 ** (attempt - 1))


def _put(fs: Any, dest: Destination, item: Upload, data: bytes | None, deadline: float) -> None:
    target = dest.target(item.rel)
    kwargs: dict[str, Any] = {}
    if dest.scheme == "gs":
        kwargs["content_type"] = content_type(item.rel)
    elif dest.scheme == "s3":
        kwargs["ContentType"] = content_type(item.rel)
    if fs.async_impl:
        kwargs["timeout"] = deadline  # fsspec's sync wrapper: cancels the call after this
    if data is None:
        fs.put_file(str(item.local), target, **kwargs)
    else:
        fs.pipe_file(target, data, **kwargs)


def _filesystem(dest: Destination) -> Any:
    if dest.scheme == "gs":
        return _gcs()
    if dest.scheme == "s3":
        return _s3()
    from fsspec.implementations.local import LocalFileSystem  # type: ignore[import-untyped]

    return LocalFileSystem(auto_mkdir=True)


def _gcs() -> Any:
    # gcsfs 2026.x turns on experimental bucket features unless this is "false"
    # when it is first imported; with them every call against an emulator waits
    # 60 s. setdefault: a user's own choice stands.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs  # type: ignore[import-untyped]

    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if emulator not in ("", "default"):
        # Emulators take no credentials; gcsfs's default chain would first spend
        # ~15 s probing for a metadata server that is not there.
        return gcsfs.GCSFileSystem(
            token="anon", endpoint_url=_with_scheme(emulator), skip_instance_cache=True
        )
    return gcsfs.GCSFileSystem(skip_instance_cache=True)


def _s3() -> Any:
    import s3fs  # type: ignore[import-untyped]

    # Retries happen in one place, _with_retries, with a deadline per attempt:
    # botocore's own (AWS_MAX_ATTEMPTS) and s3fs's (5) would multiply them.
    fs = s3fs.S3FileSystem(
        skip_instance_cache=True,
        config_kwargs={
            "connect_timeout": CONNECT_TIMEOUT_S,
            "read_timeout": READ_TIMEOUT_S,
            "retries": {"max_attempts": 1, "mode": "standard"},
        },
    )
    fs.retries = 1
    return fs


class _LibraryLog(logging.Handler):
    """Takes over gcsfs's and s3fs's loggers while publishing. gcsfs logs every
    request it gives up on, with a traceback, to stderr; the failure is reported
    once, as a PublishError, instead. What they log about retrying keeps the
    cause of a timeout: gcsfs retries a refused connection on its own until
    the deadline cancels it, and the deadline alone would hide why."""

    NAMES = ("gcsfs", "s3fs")
    CAUSE = re.compile(r"(?:exception|error): (.+)", re.I)

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.last = ""
        self.saved: list[tuple[logging.Logger, int, bool]] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a log record must never fail an upload
            if found := self.CAUSE.search(record.getMessage()):
                self.last = found[1].strip().splitlines()[0]

    def __enter__(self) -> _LibraryLog:
        for name in self.NAMES:
            logger = logging.getLogger(name)
            self.saved.append((logger, logger.level, logger.propagate))
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
            logger.addHandler(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        for logger, level, propagate in self.saved:
            logger.removeHandler(self)
            logger.setLevel(level)
            logger.propagate = propagate
        self.saved.clear()


class _Progress:
    """files and bytes done of the total; redrawn in place on a terminal, a line
    every few seconds otherwise (as the load generator's progress)."""

    def __init__(self, stream: TextIO | None, files: int, size: int, where: str) -> None:
        self.stream = stream
        self.files = files
        self.size = size
        self.where = where
        self.tty = bool(stream and stream.isatty())
        self.begin = time.monotonic()
        self.printed = self.begin
        self.done = 0
        self.sent = 0
        self.drawn = False

    def advance(self, size: int) -> None:
        self.done += 1
        self.sent += size
        if self.stream is None:
            return
        now = time.monotonic()
        if not self.tty and now - self.printed < PROGRESS_EVERY_S:
            return
        self.printed = now
        width = 30
        filled = int(width * self.sent / max(self.size, 1))
        line = (
            f"publish [{'#' * filled}{' ' * (width - filled)}] {self.done:,}/{self.files:,} files"
            f"  {self.sent / 1e6:,.1f}/{self.size / 1e6:,.1f} MB"
        )
        click.echo(f"\r{line}" if self.tty else line, file=self.stream, nl=not self.tty)
        self.drawn = self.tty

    def abandon(self) -> None:
        if self.stream is not None and self.drawn:
            click.echo("", file=self.stream)

    def finish(self) -> float:
        seconds = time.monotonic() - self.begin
        if self.stream is not None:
            line = (
                f"published {self.done:,} files ({self.sent / 1e6:,.1f} MB) to {self.where}"
                f" in {seconds:.1f} s"
            )
            click.echo(f"\r{line}{' ' * 20}" if self.tty else line, file=self.stream)
        return seconds
