"""SSH to server machines with paramiko: key authentication, host keys checked.

Host keys are checked against known_hosts (the user's and the system's, or
one file given explicitly). An unknown key is refused unless the caller opts
in to accepting new keys, which warns with the fingerprint and records it; a
changed key is always refused. Every failure names ``user@host:port``.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import paramiko

from dbtester.errors import RemoteError

__all__ = ["SshOptions", "SshSession", "SshTarget", "fingerprint"]

CONNECT_TIMEOUT_S = 10.0
#: a transfer or reply that makes no progress for this long fails (no hang)
IDLE_TIMEOUT_S = 120.0
SYSTEM_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
COMMAND_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class SshTarget:
    address: str
    port: int = 22
    user: str = "root"

    def __str__(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


@dataclass(frozen=True)
class SshOptions:
    """How to authenticate: ``identity`` is a private key file (else the SSH agent
    and ~/.ssh/id_*); ``known_hosts`` replaces the user's and system's files."""

    identity: Path | None = None
    known_hosts: Path | None = None
    accept_new_host_keys: bool = False
    warn: Callable[[str], None] = print


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as ``ssh-keygen -l`` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """Trust on first use, said out loud: record the key and warn. (A key that
    differs from a recorded one never reaches a policy: paramiko refuses it.)"""

    _lock = threading.Lock()  # hosts are set up in parallel; one writer at a time

    def __init__(self, save_to: Path, warn: Callable[[str], None]) -> None:
        self.save_to = save_to
        self.warn = warn

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        self.warn(
            f"warning: accepting the new {key.get_name()} host key of {hostname}"
            f" ({fingerprint(key)}) and adding it to {self.save_to}"
        )
        with self._lock:
            self.save_to.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with self.save_to.open("a") as out:
                out.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)


def _default_known_hosts() -> Path:
    return Path.home() / ".ssh" / "known_hosts"


class SshSession:
    """One SSH connection to a host; a context manager."""

    def __init__(self, target: SshTarget, options: SshOptions) -> None:
        self.target = target
        self.options = options
        self.client = paramiko.SSHClient()
        self._sftp: paramiko.SFTPClient | None = None

    def __enter__(self) -> SshSession:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _trust(self) -> Path:
        """Load the known host keys and the policy for unknown ones; returns the
        known_hosts file that new keys go to (and that messages name)."""
        options = self.options
        known = options.known_hosts or _default_known_hosts()
        if options.known_hosts is None:
            if SYSTEM_KNOWN_HOSTS.is_file():
                self.client.load_system_host_keys(str(SYSTEM_KNOWN_HOSTS))
            self.client.load_system_host_keys()  # ~/.ssh/known_hosts
        elif known.exists():
            self.client.load_host_keys(str(known))
        if options.accept_new_host_keys:
            self.client.set_missing_host_key_policy(_AcceptNew(known, options.warn))
        else:
            self.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        return known

    def connect(self) -> None:
        options, target = self.options, self.target
        known = self._trust()
        identity = options.identity
        if identity is not None and not identity.is_file():
            raise RemoteError(f"{target}: SSH key {identity} does not exist")
        try:
            self.client.connect(
                target.address,
                port=target.port,
                username=target.user,
                key_filename=str(identity) if identity else None,
                allow_agent=identity is None,
                look_for_keys=identity is None,
                timeout=CONNECT_TIMEOUT_S,
                banner_timeout=CONNECT_TIMEOUT_S,
                auth_timeout=CONNECT_TIMEOUT_S,
            )
        except paramiko.BadHostKeyException as exc:
            entry = target.address if target.port == 22 else f"[{target.address}]:{target.port}"
            raise RemoteError(
                f"{target}: REFUSED: the host key changed (now {exc.key.get_name()}"
                f" {fingerprint(exc.key)}, {known} has {fingerprint(exc.expected_key)})."
                " This can be an attack. If the machine was really reinstalled, remove the"
                f" old key with: ssh-keygen -f {shlex.quote(str(known))} -R {shlex.quote(entry)}"
            ) from None
        except paramiko.AuthenticationException as exc:
            tried = f"key {identity}" if identity else "the SSH agent's and ~/.ssh's keys"
            raise RemoteError(
                f"{target}: authentication failed with {tried} ({exc}); is the public key"
                f" in {target.user}'s authorized_keys there?"
            ) from None
        except TimeoutError:
            raise RemoteError(
                f"{target}: cannot reach the host: no answer within {CONNECT_TIMEOUT_S:.0f} s"
            ) from None
        except paramiko.ssh_exception.NoValidConnectionsError as exc:
            reasons = "; ".join(
                sorted({getattr(e, "strerror", None) or str(e) for e in exc.errors.values()})
            )
            raise RemoteError(f"{target}: cannot reach the host: {reasons}") from None
        except OSError as exc:
            raise RemoteError(f"{target}: cannot reach the host: {exc.strerror or exc}") from None
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise RemoteError(
                    f"{target}: REFUSED: unknown host key ({known} has none for this host)."
                    " Check the key with the machine's owner and add it (ssh-keyscan"
                    f" -p {target.port} {target.address} >> {known}), or pass"
                    " --accept-new-host-keys to trust it on first use"
                ) from None
            raise RemoteError(f"{target}: SSH failed: {exc}") from None

        transport = self.client.get_transport()
        if transport is not None:
            transport.set_keepalive(15)  # a dead peer is noticed, not waited on

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        self.client.close()

    # ------------------------------------------------------------------ commands

    def run(self, command: str, *, check: bool = True, timeout: float = COMMAND_TIMEOUT_S) -> str:
        """Run a shell command; return its stdout. With ``check``, a non-zero exit
        raises naming the host, the command's first word and stderr's tail."""
        try:
            _, stdout, stderr = self.client.exec_command(command, timeout=timeout)
            out = stdout.read().decode(errors="replace")
            err = stderr.read().decode(errors="replace")
            status = stdout.channel.recv_exit_status()
        except TimeoutError:
            raise RemoteError(f"{self.target}: command timed out after {timeout:.0f} s") from None
        except paramiko.SSHException as exc:
            raise RemoteError(f"{self.target}: SSH failed: {exc}") from None
        if check and status != 0:
            tail = "\n".join((err or out).strip().splitlines()[-15:])
            raise RemoteError(f"{self.target}: `{_summary(command)}` exited {status}:\n{tail}")
        return out

    # ------------------------------------------------------------------ files

    @property
    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
            self._sftp.get_channel().settimeout(IDLE_TIMEOUT_S)  # type: ignore[union-attr]
        return self._sftp

    def size(self, path: PurePosixPath) -> int | None:
        try:
            return self.sftp.stat(str(path)).st_size
        except OSError:
            return None

    def put(self, local: Path, remote: PurePosixPath) -> None:
        """Copy a file, keeping its executable bits; written under a temporary name
        and renamed, so an interrupted copy never looks complete."""
        partial = f"{remote}.partial"
        self.sftp.put(str(local), partial)
        self.sftp.chmod(partial, stat.S_IMODE(local.stat().st_mode))
        self.sftp.posix_rename(partial, str(remote))

    def write(self, remote: PurePosixPath, data: str | bytes, mode: int = 0o644) -> bool:
        """Write a small file with ``mode`` set before any byte lands (tokens);
        returns False when the file already had exactly this content and mode."""
        payload = data.encode() if isinstance(data, str) else data
        try:
            with self.sftp.open(str(remote), "rb") as existing:
                same = existing.read() == payload
            if same and stat.S_IMODE(self.sftp.stat(str(remote)).st_mode or 0) == mode:
                return False
        except OSError:
            pass
        partial = f"{remote}.partial"
        with self.sftp.open(partial, "wb") as out:
            out.chmod(mode)
            out.write(payload)
        self.sftp.posix_rename(partial, str(remote))
        return True

    def read(self, remote: PurePosixPath) -> str | None:
        try:
            with self.sftp.open(str(remote), "rb") as f:
                return bytes(f.read()).decode(errors="replace")
        except OSError:
            return None


def _summary(command: str) -> str:
    words = command.split()
    return " ".join(words[:4]) + (" ..." if len(words) > 4 else "")
