"""Object stores on loopback for the publishing and history tests: a server
started and stopped by PID, a bucket and how to read it without dbtester,
and the environment a ``dbtester`` subprocess gets (the host's own cloud
settings out, a secret key that must never show up anywhere in)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.poll import poll_until

__all__ = ["FOREIGN", "MARKER", "Bucket", "below", "cloud_env", "get", "serve", "tool"]

#: stands in for a secret key: it must never show up in output or in any file
MARKER = f"dbtester-secret-{secrets.token_hex(8)}"
#: the host's own cloud settings, kept out of the subprocesses
FOREIGN = ("AWS_", "GOOGLE_", "STORAGE_EMULATOR_HOST", "GCSFS_", "CLOUDSDK_")


@dataclass
class Bucket:
    """A bucket on a loopback server, and how to read it without dbtester."""

    scheme: str
    name: str
    endpoint: str
    env: dict[str, str]
    objects: Callable[[str], dict[str, bytes]]  # prefix -> {key below it: content}

    def url(self, prefix: str) -> str:
        return f"{self.scheme}://{self.name}/{prefix}"

    def public(self, prefix: str) -> str:
        return f"{self.endpoint}/{self.name}/{prefix}"


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def serve(argv: list[str], port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server until the ``with`` ends (a module fixture's life); stop it
    by its PID. AssertionError with its log when it exits or does not listen
    on ``port`` within 30 s."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        poll_until(
            lambda: proc.poll() is not None or _accepts(port),
            30,
            interval_s=0.1,
            message=lambda: f"{argv[0]} did not start: {log.read_text()[-2000:]}",
        )
        if proc.poll() is not None:
            raise AssertionError(f"{argv[0]} exited: {log.read_text()[-2000:]}")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def tool(name: str) -> str:
    """A dev dependency's script: beside this interpreter (a venv that is not
    on PATH, as under `make test`), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def below(prefix: str, objects: dict[str, bytes]) -> dict[str, bytes]:
    """The objects under ``prefix/``, keyed by what follows it."""
    return {
        k.removeprefix(f"{prefix}/"): v for k, v in objects.items() if k.startswith(f"{prefix}/")
    }


def get(url: str) -> bytes:
    """The body of a GET."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        data: bytes = reply.read()
        return data


def cloud_env(extra: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """This process's environment without the host's cloud settings, with test
    credentials whose secret is :data:`MARKER`, and ``extra`` over it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
    return {
        **env,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": MARKER,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        **extra,
    }
