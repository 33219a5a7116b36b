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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from dbtester.errors import PublishError, PublishInputError
from dbtester.publish.destination import (
    Destination,
    clean_url,
    parse_destination,
    public_base,
    with_scheme,
)
from dbtester.publish.masking import sanitize
from dbtester.publish.readme import published_readme
from dbtester.results import ResultsLayout
from dbtester.util.progress import Progress

__all__ = [
    "ATTEMPTS",
    "Published",
    "Upload",
    "content_type",
    "plan_uploads",
    "publish",
    "retry_command",
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
# Content types browsers display instead of downloading (mimetypes knows no
# .log or .yaml here); text is UTF-8 throughout a results directory.
EXTRA_TYPES = {".log": "text/plain", ".yaml": "text/plain", ".md": "text/markdown"}


@dataclass(frozen=True)
class Upload:
    rel: str  # POSIX path relative to the results directory: the key below the URL
    local: Path
    size: int


def plan_uploads(directory: Path) -> list[Upload]:
    """Every regular file below ``directory``, sorted by path, the README and
    the summary last. Directory symlinks are not followed."""
    index_files = ResultsLayout(directory).index_files
    found = []
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in names:
            path = Path(root, name)
            if path.is_file():
                rel = path.relative_to(directory).as_posix()
                found.append(Upload(rel, path, path.stat().st_size))

    def order(item: Upload) -> tuple[int, str]:
        return (index_files.index(item.rel) if item.rel in index_files else -1, item.rel)

    return sorted(found, key=order)


def content_type(rel: str) -> str:
    suffix = posixpath.splitext(rel)[1].lower()
    kind = EXTRA_TYPES.get(suffix) or mimetypes.guess_type(rel)[0] or "application/octet-stream"
    return f"{kind}; charset=utf-8" if kind.startswith("text/") else kind


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
    report: str = ""  # likewise its report.html ("" when the directory has none)


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
    layout = ResultsLayout(directory)
    _check_source(layout, dest)
    items = plan_uploads(directory)
    readme_rel = layout.relative(layout.readme)
    readme = _readme_bytes(layout, base)
    sizes = [len(readme) if i.rel == readme_rel and readme is not None else i.size for i in items]
    total = sum(sizes)
    stream = None if quiet else (progress or sys.stderr)
    bar = Progress(stream, total, "publish")
    sent = 0
    with _LibraryLog() as log:
        try:
            fs = _filesystem(dest)
        except Exception as exc:
            reason = _reason(exc, deadline_s, bool(dest.bucket))
            raise _failure(directory, url, public_url, f"before any upload: {reason}") from None
        for done, (item, size) in enumerate(zip(items, sizes, strict=True)):
            data = readme if item.rel == readme_rel else None
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
            sent += size
            bar.update(sent, _describe(done + 1, len(items), sent, total))
    seconds = bar.finish(
        f"published {len(items):,} files ({sent / 1e6:,.1f} MB) to {clean_url(url)}"
        f" in {bar.elapsed:.1f} s"
    )

    def published(rel: str) -> str:
        return f"{base}/{rel}" if base else dest.target(rel)

    report_rel = layout.relative(layout.report)
    report = published(report_rel) if any(i.rel == report_rel for i in items) else ""
    return Published(clean_url(url), len(items), total, seconds, published(readme_rel), report)


def _failure(directory: Path, url: str, public_url: str | None, what: str) -> PublishError:
    return PublishError(
        f"publishing {directory} to {clean_url(url)} failed {what};"
        f" the local results in {directory} are intact.\n"
        f"Retry with: {retry_command(directory, url, public_url)}"
    )


def _describe(done: int, files: int, sent: int, total: int) -> Callable[[float], str]:
    return lambda _rate: f"{done:,}/{files:,} files  {sent / 1e6:,.1f}/{total / 1e6:,.1f} MB"


def _check_source(layout: ResultsLayout, dest: Destination) -> None:
    directory = layout.root
    if not layout.summary.is_file():
        raise PublishInputError(
            f"{directory} is not a results directory (it has no {layout.summary.name});"
            " publish the directory `dbtester run` wrote"
        )
    if dest.scheme == "file":
        source, target = directory.resolve(), Path(dest.root).resolve()
        if target == source or source in target.parents:
            raise PublishInputError(
                f"cannot publish {directory} into itself ({dest.root}): the local results"
                " are never written to"
            )


def _readme_bytes(layout: ResultsLayout, base: str | None) -> bytes | None:
    """The published README's bytes, or None when the local file goes as it is."""
    path = layout.readme
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
            token="anon", endpoint_url=with_scheme(emulator), skip_instance_cache=True
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
