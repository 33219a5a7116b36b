"""Install database binaries into ``$DBTESTER_HOME`` (default ``~/.cache/dbtester``).

Each database kind lists, in its own module, the ways a version can be had
(:class:`Source` objects: an official archive, a Go build through the module
proxy, a Debian package already on the machine, Maven Central...). We try them
in order; the first that works is installed under
``$DBTESTER_HOME/<kind>/<version>/`` together with a ``manifest.json``. A
second call finds the manifest and returns at once. When every way fails the
error lists each one and why.

Installs are atomic (built in a temporary directory, then renamed) and
serialised by a lock file, so two runs that need the same version do not race.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dbtester.errors import InstallError
from dbtester.util.paths import dbtester_home, locked
from dbtester.util.progress import Reporter

__all__ = [
    "CONNECT_TIMEOUT_S",
    "ArchiveDownload",
    "DebianPackage",
    "GoBuild",
    "Installed",
    "LocalGoBuild",
    "MavenArtifacts",
    "Source",
    "SourceUnavailable",
    "debian_version",
    "ensure_installed",
    "find_installed",
    "go_proxy_versions",
    "list_installed",
    "maven_versions",
]

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
# A machine without internet must fall through to the next source within
# seconds: DNS failures are immediate, a black-holed connect waits this long.
CONNECT_TIMEOUT_S = 5.0


class SourceUnavailable(Exception):  # noqa: N818 - a control-flow signal, not a user error
    """This source cannot provide the version; the message says why in one line."""


@dataclass(frozen=True)
class Installed:
    """A database version ready to run: ``entry`` maps roles (e.g. ``etcd``,
    ``java``, ``classpath``) to paths or values the database module understands."""

    kind: str
    version: str
    root: Path
    source: str
    entry: Mapping[str, str]
    installed_at: str

    def path(self, role: str) -> Path:
        return Path(self.entry[role])

    def files(self) -> list[Path]:
        """Every file the entry names (a classpath names several), in a fixed order."""
        found = []
        for role in sorted(self.entry):
            for part in self.entry[role].split(os.pathsep):
                path = Path(part)
                if path.is_absolute() and path.is_file():
                    found.append(path)
        return found

    def sha256(self) -> str:
        """One digest of the files this version runs, so two runs of "the same
        version" built differently can be told apart."""
        digest = hashlib.sha256()
        for path in self.files():
            # name and size first: where one file ends and the next begins is
            # part of what is hashed
            digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        return digest.hexdigest()


class Source(ABC):
    """One way to obtain a database version."""

    @property
    @abstractmethod
    def description(self) -> str:
        """What this source is, for messages (e.g. 'release archive https://...')."""

    @abstractmethod
    def fetch(self, dest: Path, reporter: Reporter) -> dict[str, str]:
        """Put the version's files under ``dest`` (an empty directory) and return the
        entry map; raise SourceUnavailable when this source cannot provide it."""


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class ArchiveDownload(Source):
    """A release archive (.tar.gz or .zip) verified against a published checksum
    file, unpacked under ``dest``; ``locate`` turns the unpacked tree into the
    entry map."""

    url: str
    checksum_url: str
    locate: Callable[[Path], dict[str, str]]
    algorithm: str = "sha256"

    @property
    def description(self) -> str:
        return f"release archive {self.url}"

    def fetch(self, dest: Path, reporter: Reporter) -> dict[str, str]:
        name = self.url.rsplit("/", 1)[-1]
        expected = self._expected_digest(name)
        archive = dest / name
        digest = _download(self.url, archive, reporter, self.algorithm)
        if digest != expected:
            raise SourceUnavailable(f"checksum mismatch for {name}: {digest} != {expected}")
        _unpack(archive, dest)
        archive.unlink()
        entry = self.locate(dest)
        missing = [v for v in entry.values() if not Path(v).exists()]
        if missing:
            raise SourceUnavailable(f"{name} has no {', '.join(missing)}")
        return entry

    def _expected_digest(self, name: str) -> str:
        text = _read_url(self.checksum_url).decode("utf-8", "replace")
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[-1].lstrip("*") == name:
                return parts[0].lower()
            if len(parts) == 1 and len(parts[0]) in (64, 128):  # a bare digest file
                return parts[0].lower()
        raise SourceUnavailable(f"{self.checksum_url} lists no checksum for {name}")


def _unpack(archive: Path, dest: Path) -> None:
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                target = Path(zipped.extract(info, dest))
                mode = info.external_attr >> 16
                if mode & 0o111:  # zip does not restore permissions by itself
                    target.chmod(0o755)
        return
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")  # refuses absolute paths and escapes


@dataclass(frozen=True)
class GoBuild(Source):
    """Build a Go main package through the Go module proxy in a throw-away module.

    ``go install pkg@version`` refuses modules with replace directives (etcd's
    server has them), so we make a temporary module, ``go get`` the version and
    build from there.
    """

    module: str
    version: str  # the module version, e.g. v3.5.17
    package: str
    binary: str  # the entry role and file name
    env: Mapping[str, str] = field(default_factory=dict)
    expected_minutes: float = 1.0

    @property
    def description(self) -> str:
        return f"Go build of {self.module}@{self.version} through the Go module proxy"

    def fetch(self, dest: Path, reporter: Reporter) -> dict[str, str]:
        go, env = _go(self.env)
        work = dest / ".gobuild"
        work.mkdir()
        log = dest / "build.log"
        label = (
            f"building {self.binary} {self.version} with Go "
            f"(about {self.expected_minutes:g} min; log: {log})"
        )
        with reporter.timer(label):
            _go_steps(
                [
                    [go, "mod", "init", "dbtester.local/build"],
                    [go, "get", f"{self.module}@{self.version}"],
                    [go, "build", "-trimpath", "-o", str(dest / self.binary), self.package],
                ],
                work,
                env,
                log,
            )
        shutil.rmtree(work)
        return {self.binary: str(dest / self.binary)}


@dataclass(frozen=True)
class LocalGoBuild(Source):
    """A Go program whose source ships with dbtester (``directory`` holds its
    go.mod and go.sum), built through the module proxy for its dependencies."""

    directory: Path
    binary: str  # the entry role and file name

    @property
    def description(self) -> str:
        return f"Go build of {self.binary} from {self.directory}"

    def fetch(self, dest: Path, reporter: Reporter) -> dict[str, str]:
        go, env = _go({})
        work = dest / ".gobuild"
        # a copy: the package's own directory may be read-only (a wheel install)
        shutil.copytree(self.directory, work)
        with reporter.timer(f"building {self.binary} with Go (log: {dest / 'build.log'})"):
            argv = [go, "build", "-trimpath", "-o", str(dest / self.binary), "."]
            _go_steps([argv], work, env, dest / "build.log")
        shutil.rmtree(work)
        return {self.binary: str(dest / self.binary)}


def _go(extra: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The ``go`` command and the environment a build runs it in."""
    go = shutil.which("go")
    if go is None:
        raise SourceUnavailable("the 'go' command is not on PATH (install Go to build)")
    return go, {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0", **extra}


def _go_steps(
    steps: Sequence[Sequence[str]], work: Path, env: Mapping[str, str], log: Path
) -> None:
    """Each Go command in ``work``, its output appended to ``log``;
    SourceUnavailable naming the first that fails."""
    with log.open("a") as out:
        for argv in steps:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            result = subprocess.run(
                argv, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
            )
            if result.returncode != 0:
                raise SourceUnavailable(f"'{' '.join(argv[1:3])}' failed: {_tail(log)}")


@dataclass(frozen=True)
class DebianPackage(Source):
    """Debian's build of a version: taken from the installed package, or (with
    ``download_ok``) fetched with ``apt-get download`` and unpacked without
    installing it, so no system service is started and no root is needed.
    ``build_entry(root, dest)`` copies or points at files under ``root`` (``/``
    for the installed package)."""

    package: str
    version: str
    build_entry: Callable[[Path, Path], dict[str, str]]
    download_ok: bool = True

    @property
    def description(self) -> str:
        return f"Debian package {self.package}"

    def fetch(self, dest: Path, reporter: Reporter) -> dict[str, str]:
        installed = debian_version(self.package)
        if installed == self.version:
            return self.build_entry(Path("/"), dest)
        candidate = _apt_candidate(self.package)
        if not self.download_ok or candidate is None or _upstream(candidate) != self.version:
            offered = installed or (candidate and _upstream(candidate))
            if offered:
                raise SourceUnavailable(f"Debian's {self.package} is {offered}, not {self.version}")
            raise SourceUnavailable(f"not available (as root: apt-get install {self.package})")
        return self.build_entry(self._download(candidate, dest, reporter), dest)

    def _download(self, candidate: str, dest: Path, reporter: Reporter) -> Path:
        work = dest / ".deb"
        work.mkdir()
        with reporter.timer(f"downloading Debian's {self.package} {candidate}"):
            result = subprocess.run(
                ["apt-get", "download", f"{self.package}={candidate}"],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
        debs = list(work.glob("*.deb"))
        if result.returncode != 0 or not debs:
            raise SourceUnavailable(f"apt-get download failed: {result.stderr.strip()[-200:]}")
        root = work / "root"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(root)], check=True)
        return root


def debian_version(package: str) -> str | None:
    """The upstream version of an installed Debian package ('3.4.23' from '3.4.23-4+b1')."""
    if shutil.which("dpkg-query") is None:
        return None
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}|${Version}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    status, _, full = result.stdout.partition("|")
    if result.returncode != 0 or not status.endswith(" installed"):
        return None
    return _upstream(full)


def _apt_candidate(package: str) -> str | None:
    if shutil.which("apt-cache") is None or shutil.which("dpkg-deb") is None:
        return None
    result = subprocess.run(
        ["apt-cache", "policy", package], capture_output=True, text=True, check=False
    )
    for line in result.stdout.splitlines():
        name, _, value = line.strip().partition(":")
        if name == "Candidate" and value.strip() not in ("", "(none)"):
            return value.strip()
    return None


def _upstream(debian: str) -> str:
    upstream = debian.split(":", 1)[-1]  # drop an epoch
    for sep in ("-", "+", "~"):
        upstream = upstream.split(sep, 1)[0]
    return upstream


@dataclass(frozen=True)
class MavenArtifacts(Source):
    """Resolve a Java artifact and its runtime dependencies from Maven Central with
    ``mvn`` into ``dest/lib``; the entry gets ``classpath`` and ``java``.

    ``also`` (``group:artifact`` names) are resolved beside it at the versions
    the ``managed_by`` pom (``group:artifact``, at ``version``) pins: a
    project's ``provided`` dependencies, which its release ships in ``lib/``
    but Maven never resolves for a dependent (ZooKeeper's metrics library)."""

    group: str
    artifact: str
    version: str
    managed_by: str = ""
    also: tuple[str, ...] = ()
    expected_minutes: float = 1.0

    @property
    def description(self) -> str:
        return f"Maven Central {self.group}:{self.artifact}:{self.version}"

    def fetch(self, dest: Path, reporter: Reporter) -> dict[str, str]:
        mvn, java = shutil.which("mvn"), shutil.which("java")
        if mvn is None or java is None:
            raise SourceUnavailable("needs 'mvn' and 'java' on PATH")
        work = dest / ".maven"
        work.mkdir()
        (work / "pom.xml").write_text(self.pom())
        log = dest / "build.log"
        argv = [
            mvn,
            "-B",
            "-q",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={dest / 'lib'}",
        ]
        label = f"fetching {self.artifact} {self.version} from Maven Central"
        with reporter.timer(label), log.open("w") as out:
            result = subprocess.run(
                argv, cwd=work, stdout=out, stderr=subprocess.STDOUT, check=False
            )
        if result.returncode != 0:
            raise SourceUnavailable(f"mvn failed: {_tail(log)}")
        shutil.rmtree(work)
        jars = sorted(str(p) for p in (dest / "lib").glob("*.jar"))
        if not jars:
            raise SourceUnavailable("mvn resolved no jars")
        return {"java": java, "classpath": os.pathsep.join(jars)}

    def pom(self) -> str:
        """The throw-away project whose dependencies are what to fetch."""
        wanted = [_dependency(self.group, self.artifact, f"<version>{self.version}</version>")]
        wanted += [_dependency(*name.split(":", 1)) for name in self.also]
        managed = ""
        if self.managed_by:
            group, artifact = self.managed_by.split(":", 1)
            pinned = f"<version>{self.version}</version><type>pom</type><scope>import</scope>"
            managed = (
                "  <dependencyManagement><dependencies>\n"
                f"    {_dependency(group, artifact, pinned)}\n"
                "  </dependencies></dependencyManagement>\n"
            )
        listed = "\n".join(f"    {each}" for each in wanted)
        return _POM.format(managed=managed, dependencies=listed)


def _dependency(group: str, artifact: str, more: str = "") -> str:
    named = f"<groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
    return f"<dependency>{named}{more}</dependency>"


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dbtester.local</groupId>
  <artifactId>fetch</artifactId>
  <version>0</version>
{managed}  <dependencies>
{dependencies}
  </dependencies>
</project>
"""


# --------------------------------------------------------------------------- install


def find_installed(kind: str, version: str) -> Installed | None:
    root = dbtester_home() / kind / version
    manifest = root / MANIFEST
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    entry = {str(k): str(v) for k, v in data.get("entry", {}).items()}
    # A binary deleted by hand means the install is gone, not instant.
    if not all(Path(p).exists() for v in entry.values() for p in v.split(os.pathsep)):
        return None
    return Installed(kind, version, root, data["source"], entry, data["installed_at"])


def list_installed() -> list[Installed]:
    home = dbtester_home()
    found = []
    for manifest in sorted(home.glob(f"*/*/{MANIFEST}")):
        item = find_installed(manifest.parent.parent.name, manifest.parent.name)
        if item is not None:
            found.append(item)
    return found


def ensure_installed(
    kind: str,
    version: str,
    sources: Sequence[Source],
    reporter: Reporter | None = None,
    verify: Callable[[Mapping[str, str]], None] | None = None,
) -> Installed:
    """Return the installed ``kind`` ``version``, installing it from the first source
    that works. ``verify`` checks what a source produced (e.g. that the binary
    reports the right version) and raises SourceUnavailable if not. Raises
    InstallError listing every source tried."""
    reporter = reporter or Reporter()
    done = find_installed(kind, version)
    if done is not None:
        return done
    root = dbtester_home() / kind / version
    root.parent.mkdir(parents=True, exist_ok=True)
    with locked(root.parent / f".{version}.lock"):
        done = find_installed(kind, version)  # another process may have finished it
        if done is not None:
            return done
        tried: list[str] = []
        for source in sources:
            reporter.say(f"{kind} {version}: trying {source.description}")
            staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=root.parent))
            try:
                entry = source.fetch(staging, reporter)
                if verify is not None:
                    verify(entry)
            except SourceUnavailable as exc:
                kept = _keep_log(staging, f"{kind}-{version}")
                note = f" (log: {kept})" if kept else ""
                tried.append(f"{source.description}: {exc}{note}")
                reporter.say(f"  not available: {exc}")
                shutil.rmtree(staging, ignore_errors=True)
                continue
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            return _commit(kind, version, source.description, staging, entry)
    lines = "\n".join(f"  - {t}" for t in tried) or "  (no way is known for this kind)"
    raise InstallError(f"cannot install {kind}@{version}; tried:\n{lines}")


def _commit(
    kind: str, version: str, source: str, staging: Path, entry: dict[str, str]
) -> Installed:
    root = dbtester_home() / kind / version
    # Paths recorded while staging must point at the final location.
    final = {k: v.replace(str(staging), str(root)) for k, v in entry.items()}
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "kind": kind,
        "version": version,
        "source": source,
        "entry": final,
        "installed_at": stamp,
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if root.exists():  # a broken earlier install (manifest or binary missing)
        shutil.rmtree(root)
    staging.rename(root)
    return Installed(kind, version, root, source, final, stamp)


def _keep_log(staging: Path, name: str) -> Path | None:
    """Move a failed build's log out of the staging directory before it is removed."""
    log = staging / "build.log"
    if not log.exists():
        return None
    logs = dbtester_home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    kept = logs / f"{name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}.log"
    shutil.move(log, kept)
    return kept


# --------------------------------------------------------------------------- listing

GO_PROXY = "https://proxy.golang.org"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


def go_proxy_versions(module: str) -> list[str]:
    """The versions the Go module proxy lists for ``module``, without the
    leading ``v`` and in the proxy's order; SourceUnavailable when it cannot
    be reached."""
    # The proxy's path escapes upper case as "!" plus lower case.
    escaped = re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), module)
    text = _read_url(f"{GO_PROXY}/{escaped}/@v/list").decode(errors="replace")
    return [line.strip().removeprefix("v") for line in text.splitlines() if line.strip()]


def maven_versions(group: str, artifact: str) -> list[str]:
    """The versions Maven Central's metadata lists for ``group:artifact``."""
    url = f"{MAVEN_CENTRAL}/{group.replace('.', '/')}/{artifact}/maven-metadata.xml"
    text = _read_url(url).decode(errors="replace")
    return re.findall(r"<version>\s*([^<\s]+)\s*</version>", text)


# --------------------------------------------------------------------------- helpers


def _open_url(url: str) -> Any:
    try:
        return urllib.request.urlopen(url, timeout=CONNECT_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        raise SourceUnavailable(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SourceUnavailable(f"cannot reach {url}: {reason}") from None


def _read_url(url: str) -> bytes:
    with _open_url(url) as response:
        try:
            return bytes(response.read())
        except OSError as exc:
            raise SourceUnavailable(f"download of {url} failed: {exc}") from None


def _download(url: str, target: Path, reporter: Reporter, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with _open_url(url) as response, target.open("wb") as out:
        total = int(response.headers.get("Content-Length") or 0) or None
        with reporter.bytes_bar(f"downloading {target.name}", total) as advance:
            while True:
                try:
                    chunk = response.read(1 << 16)
                except OSError as exc:
                    raise SourceUnavailable(f"download of {url} failed: {exc}") from None
                if not chunk:
                    break
                digest.update(chunk)
                out.write(chunk)
                advance(len(chunk))
    return digest.hexdigest()


def _tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text[-lines:]) or "(no output)"
