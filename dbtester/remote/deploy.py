"""``dbtester agents up|down|status``: agents on the test case's hosts, over SSH.

On each host, everything lives under one directory (``agent_dir``, default
``~/dbtester-agent``)::

    wheels/        dbtester's wheel and every dependency's (no index needed there)
    venv/          the agent's Python environment
    home/          its DBTESTER_HOME: the database binaries it may run
    data/          members' data, metrics and logs
    agent.yaml     listen address, token file, data root
    agent.token    the bearer token (0600)
    agent.pid      the agent's PID (when run without systemd)
    agent.out      its stdout/stderr (likewise)

The agent runs under systemd where systemd is the init and the user is root
(unit ``dbtester-agent-<port>.service``), else as a background process in its
own session with a pidfile. Both ``up`` and ``down`` converge: running them
twice changes nothing the second time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path, PurePosixPath

import yaml
from pydantic import ValidationError

from dbtester import slowdisk
from dbtester.agent.client import AgentClient
from dbtester.agent.config import TlsFiles
from dbtester.config.model import DatabaseSpec, TestCase
from dbtester.errors import AgentError, RemoteError
from dbtester.install import MANIFEST, MANIFEST_VERSION, Installed
from dbtester.proto import agent_pb2 as pb
from dbtester.remote.ssh import SshOptions, SshSession, SshTarget
from dbtester.remote.wheels import Wheelhouse, python_tag
from dbtester.util.net import endpoint_host, join_host_port
from dbtester.util.progress import Reporter

__all__ = [
    "AgentHost",
    "HostStatus",
    "agent_hosts",
    "agents_down",
    "agents_status",
    "agents_up",
    "local_installs",
    "members_summary",
]

HEALTH_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 90.0  # the agent stops its databases first (grace 10 s each)

Say = Callable[[str], None]


@dataclass(frozen=True)
class AgentHost:
    """One agent: a host and port, how to reach it over SSH, what it must run."""

    address: str
    agent_port: int
    ssh: SshTarget
    agent_dir: str
    installs: tuple[tuple[str, str], ...]  # (kind, version)
    #: the hosts a Load call may name (its agent.yaml's load_targets)
    load_targets: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return join_host_port(self.address, self.agent_port)


def agent_hosts(case: TestCase, ssh_user: str | None = None) -> list[AgentHost]:
    """Every distinct agent the test case's ``hosts`` and ``load_hosts``
    name, in order of appearance (a load host installs no database; it may
    load only the case's databases, a server-only agent none)."""
    found: dict[tuple[str, int], AgentHost] = {}
    default_user = ssh_user or os.environ.get("USER") or "root"
    loaders = {(h.address, h.agent_port) for h in case.load_hosts}
    targets = database_addresses(case)
    placed = [(db, host) for db in case.databases for host in db.hosts]
    for host in case.load_hosts:
        key = (host.address, host.agent_port)
        if key not in found and all((h.address, h.agent_port) != key for _, h in placed):
            target = SshTarget(host.address, host.ssh_port, host.ssh_user or default_user)
            found[key] = AgentHost(
                host.address, host.agent_port, target, host.agent_dir, (), targets
            )
    for db in case.databases:
        for host in db.hosts:
            key = (host.address, host.agent_port)
            target = SshTarget(host.address, host.ssh_port, host.ssh_user or default_user)
            seen = found.get(key)
            if seen is None:
                found[key] = AgentHost(
                    host.address,
                    host.agent_port,
                    target,
                    host.agent_dir,
                    _installs(case, db),
                    targets if key in loaders else (),
                )
                continue
            if (seen.ssh, seen.agent_dir) != (target, host.agent_dir):
                raise RemoteError(
                    f"{seen.name} appears twice with different ssh_port/ssh_user/agent_dir"
                )
            installs = tuple(dict.fromkeys([*seen.installs, *_installs(case, db)]))
            if installs != seen.installs:
                found[key] = replace(seen, installs=installs)
    return list(found.values())


def _installs(case: TestCase, db: DatabaseSpec) -> tuple[tuple[str, str], ...]:
    """What a host of ``db`` runs: each version of it, and the slow-disk
    layer when the case's faults slow a disk."""
    wanted = [(db.kind, v) for v in case.versions_of(db)]
    if slowdisk.needed(case):
        wanted.append((slowdisk.KIND, slowdisk.VERSION))
    return tuple(wanted)


def database_addresses(case: TestCase) -> tuple[str, ...]:
    """The hosts of every database in ``case``: what its load hosts may load."""
    found: list[str] = []
    for db in case.databases:
        found += [h.address.strip("[]") for h in db.hosts]
        found += [endpoint_host(e) for e in db.endpoints]
    return tuple(dict.fromkeys(found))


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    base: PurePosixPath

    @property
    def wheels(self) -> PurePosixPath:
        return self.base / "wheels"

    @property
    def venv(self) -> PurePosixPath:
        return self.base / "venv"

    @property
    def home(self) -> PurePosixPath:
        return self.base / "home"

    @property
    def data(self) -> PurePosixPath:
        return self.base / "data"

    @property
    def config(self) -> PurePosixPath:
        return self.base / "agent.yaml"

    @property
    def token(self) -> PurePosixPath:
        return self.base / "agent.token"

    @property
    def pidfile(self) -> PurePosixPath:
        return self.base / "agent.pid"

    @property
    def out(self) -> PurePosixPath:
        return self.base / "agent.out"

    @property
    def wheel_stamp(self) -> PurePosixPath:
        return self.base / "dbtester-wheel.sha256"

    @property
    def marker(self) -> PurePosixPath:
        """Written first by ``up``; ``down`` removes nothing where it is missing."""
        return self.base / ".dbtester-agent"

    def owned(self) -> list[PurePosixPath]:
        """What ``down`` removes (never the directory's other contents)."""
        files = [self.config, self.token, self.pidfile, self.out, self.wheel_stamp]
        partials = [f.with_name(f.name + ".partial") for f in files]
        return [self.wheels, self.venv, self.home, *files, *partials, self.marker]


def _q(path: PurePosixPath | str) -> str:
    return shlex.quote(str(path))


def _layout(session: SshSession, host: AgentHost) -> Layout:
    if host.agent_dir.startswith("/"):
        return Layout(PurePosixPath(host.agent_dir))
    home = session.run('printf %s "$HOME"').strip()
    if not home.startswith("/"):
        raise RemoteError(f"{host.ssh}: cannot tell the home directory (got {home!r})")
    return Layout(PurePosixPath(home) / host.agent_dir)


def _unit_name(host: AgentHost) -> str:
    return f"dbtester-agent-{host.agent_port}.service"


def _uses_systemd(session: SshSession) -> bool:
    probe = '[ -d /run/systemd/system ] && [ "$(id -u)" = 0 ] && echo yes || true'
    return session.run(probe).strip() == "yes"


def _running_pid(session: SshSession, layout: Layout) -> int | None:
    """The background agent's PID when it runs with this layout's config."""
    script = (
        f"pid=$(cat {_q(layout.pidfile)} 2>/dev/null) || exit 0; "
        f'[ -r "/proc/$pid/cmdline" ] || exit 0; '
        f"tr '\\0' ' ' < \"/proc/$pid/cmdline\" | grep -qF -- {_q(layout.config)} && echo $pid"
        " || true"
    )
    out = session.run(script).strip()
    return int(out) if out.isdigit() else None


def _systemd_active(session: SshSession, host: AgentHost) -> bool:
    state = session.run(f"systemctl is-active {_unit_name(host)} || true").strip()
    return state == "active"


# --------------------------------------------------------------------------- up


@dataclass
class _Changes:
    items: list[str] = field(default_factory=list)

    def note(self, changed: bool, what: str) -> None:
        if changed:
            self.items.append(what)


def agents_up(
    hosts: list[AgentHost],
    wheelhouse: Wheelhouse,
    token: str,
    options: SshOptions,
    installs: Mapping[tuple[str, str], Installed],
    say: Say = print,
    *,
    systemd: bool = True,
    tls: Mapping[str, bytes] | None = None,
) -> None:
    """Install and start every host's agent (in parallel); raise naming each host
    that failed, after all have been tried. ``systemd=False`` runs the agent as
    a background process with a pidfile even where systemd could run it.
    ``tls``: what the controller reaches TLS agents with (control.agents'
    remote_tls); an agent.yaml's own ``tls:`` section is kept."""

    def one(host: AgentHost) -> None:
        _up_one(
            host, wheelhouse, token, options, installs, _prefixed(say, host), systemd, tls or {}
        )

    _each(hosts, one, "could not bring up")


def _up_one(
    host: AgentHost,
    wheelhouse: Wheelhouse,
    token: str,
    options: SshOptions,
    installs: Mapping[tuple[str, str], Installed],
    say: Say,
    allow_systemd: bool,
    tls: Mapping[str, bytes],
) -> None:
    changes = _Changes()
    with SshSession(host.ssh, options) as session:
        layout = _layout(session, host)
        _claim(session, layout, host)
        session.run(
            f"umask 077 && mkdir -p {_q(layout.wheels)} {_q(layout.home)} {_q(layout.data)}"
        )
        _check_python(session, host)
        changes.note(_upload_wheels(session, layout, wheelhouse, say), "wheels")
        changes.note(_install_venv(session, layout, wheelhouse, say), "dbtester")
        for kind, version in host.installs:
            changes.note(
                _install_database(session, layout, installs[(kind, version)], say),
                f"{kind} {version}",
            )
        kept = _kept_tls(session.read(layout.config), host, tls)
        if kept:
            say("agent.yaml: its tls: section is kept")
        text = _agent_yaml(host, layout, kept)
        changes.note(session.write(layout.config, text), "agent.yaml")
        changes.note(session.write(layout.token, token + "\n", mode=0o600), "token")
        systemd = allow_systemd and _uses_systemd(session)
        _start(session, host, layout, systemd, restart=bool(changes.items), say=say)
        # TLS to an agent that serves it: the controller's CA for its certificate
        version = _health_check(session, host, layout, token, systemd, tls if kept else {})
    how = "systemd unit " + _unit_name(host) if systemd else f"pidfile {layout.pidfile}"
    say(f"agent {version} serving ({how})")


def _claim(session: SshSession, layout: Layout, host: AgentHost) -> None:
    """Mark agent_dir as ours, refusing a non-empty directory that is not: `down`
    deletes what `up` wrote there, so it must never be someone's own folder."""
    base = _q(layout.base)
    state = session.run(
        f"if [ -e {_q(layout.marker)} ]; then echo ours;"
        f' elif [ -d {base} ] && [ -n "$(ls -A {base})" ]; then echo other;'
        " else echo free; fi"
    ).strip()
    if state == "other":
        raise RemoteError(
            f"{host.ssh}: agent_dir {layout.base} exists, is not empty and was not made by"
            " dbtester agents up; choose an empty or new directory"
        )
    if state == "free":
        session.run(f"umask 077 && mkdir -p {base}")
        session.write(layout.marker, "made by dbtester agents up; down removes what up wrote\n")


def _check_python(session: SshSession, host: AgentHost) -> None:
    probe = (
        "python3 -c 'import sys, sysconfig;"
        ' print(f"cp{sys.version_info.major}{sys.version_info.minor}-{sysconfig.get_platform()}")'
        "; import venv, ensurepip'"
    )
    remote = session.run(f"{probe} 2>&1 || true").strip()
    if remote != python_tag():
        raise RemoteError(
            f"{host.ssh}: needs python3 with venv and ensurepip matching this machine's"
            f" ({python_tag()}) to install the wheels built here; python3 there says:"
            f" {remote.splitlines()[-1] if remote else 'nothing'}"
            " (Debian/Ubuntu: apt-get install python3-venv)"
        )


def _upload_wheels(session: SshSession, layout: Layout, wheelhouse: Wheelhouse, say: Say) -> bool:
    """Copy the wheels that are missing or differ (by SHA-256: a rebuilt dbtester
    wheel keeps its name and often its size); remove stale ones so pip never
    prefers an old version. Returns whether anything changed."""
    wanted = {w.name: w for w in wheelhouse.files()}
    present = dict(
        _listing(session.run(f"cd {_q(layout.wheels)} && sha256sum -- * 2>/dev/null || true"))
    )
    todo = [w for name, w in wanted.items() if present.get(name) != _sha256(w)]
    stale = [name for name in present if name not in wanted]
    if todo:
        total = sum(w.stat().st_size for w in todo)
        say(f"copying {len(todo)} wheel(s), {total / 1e6:.1f} MB")
        for wheel in todo:
            session.put(wheel, layout.wheels / wheel.name)
    if stale:
        session.run(f"cd {_q(layout.wheels)} && rm -f -- {' '.join(map(shlex.quote, stale))}")
    return bool(todo or stale)


@functools.cache
def _sha256(path: Path) -> str:
    """Hashed once per process, however many hosts are set up."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _listing(text: str) -> Iterator[tuple[str, str]]:
    """(name, digest) from sha256sum's lines."""
    for line in text.splitlines():
        digest, _, name = line.partition("  ")
        if name and len(digest) == 64:
            yield name.lstrip("*"), digest


def _install_venv(session: SshSession, layout: Layout, wheelhouse: Wheelhouse, say: Say) -> bool:
    digest = _sha256(wheelhouse.dbtester_wheel)  # the build is reproducible
    pip = layout.venv / "bin" / "pip"
    installed = session.read(layout.wheel_stamp)
    current = installed is not None and installed.strip() == digest
    if current and session.run(f"[ -x {_q(pip)} ] && echo ok || true").strip() == "ok":
        return False
    say("installing dbtester and its dependencies into a venv (offline, from the wheels)")
    session.run(f"[ -x {_q(pip)} ] || python3 -m venv {_q(layout.venv)}")
    wheel = layout.wheels / wheelhouse.dbtester_wheel.name
    # --no-compile: byte-compiling every package is most of pip's time; Python
    # compiles what the agent imports on first use.
    offline = f"--no-compile --no-index --find-links {_q(layout.wheels)}"
    session.run(f"{_q(pip)} install -q --disable-pip-version-check {offline} {_q(wheel)}")
    # Same version number, new code: reinstall dbtester itself only.
    session.run(
        f"{_q(pip)} install -q --disable-pip-version-check --no-deps --force-reinstall"
        f" {offline} {_q(wheel)}"
    )
    session.write(layout.wheel_stamp, digest + "\n")
    return True


def _portable(installed: Installed) -> bool:
    """True when every path the install uses lies inside its own directory."""
    root = str(installed.root) + "/"
    return all(p.startswith(root) for v in installed.entry.values() for p in v.split(os.pathsep))


def _install_database(session: SshSession, layout: Layout, installed: Installed, say: Say) -> bool:
    """Copy an install that is self-contained (a binary in its directory);
    otherwise (e.g. Java from Debian packages) run ``dbtester install`` there."""
    target = layout.home / installed.kind / installed.version
    label = f"{installed.kind} {installed.version}"
    if not _portable(installed):
        say(f"{label}: not self-contained here ({installed.source}); installing it there")
        env = f"DBTESTER_HOME={_q(layout.home)}"
        dbtester = layout.venv / "bin" / "dbtester"
        before = session.run(f"{env} {_q(dbtester)} install --list")
        session.run(f"{env} {_q(dbtester)} install -q {installed.kind}@{installed.version}")
        return before != session.run(f"{env} {_q(dbtester)} install --list")
    session.run(f"umask 077 && mkdir -p {_q(target)}")
    changed = False
    for local in sorted(installed.root.rglob("*")):
        if not local.is_file() or local.name == MANIFEST or local.suffix == ".log":
            continue
        remote = target / local.relative_to(installed.root).as_posix()
        if session.size(remote) == local.stat().st_size:
            continue
        say(f"{label}: copying {local.name} ({local.stat().st_size / 1e6:.0f} MB)")
        session.run(f"mkdir -p {_q(remote.parent)}")
        session.put(local, remote)
        changed = True
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "kind": installed.kind,
        "version": installed.version,
        "source": f"copied by dbtester agents up ({installed.source})",
        "entry": {
            role: os.pathsep.join(
                str(target / Path(p).relative_to(installed.root).as_posix())
                for p in value.split(os.pathsep)
            )
            for role, value in installed.entry.items()
        },
        "installed_at": installed.installed_at,
    }
    written = session.write(target / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return changed or written


def _agent_yaml(host: AgentHost, layout: Layout, tls: Mapping[str, object] | None = None) -> str:
    config: dict[str, object] = {
        "listen": host.name,
        "token_file": str(layout.token),
        "data_root": str(layout.data),
        "heartbeat_timeout_s": 60,
        "load_targets": list(host.load_targets),
    }
    if tls:
        config["tls"] = dict(tls)
    head = "# written by dbtester agents up; edits are replaced on the next up, but for tls:\n"
    return head + yaml.safe_dump(config, sort_keys=False)


def _kept_tls(
    text: str | None, host: AgentHost, tls: Mapping[str, bytes]
) -> dict[str, object] | None:
    """The ``tls:`` section of the host's agent.yaml as it is (the docs tell
    users to write it by hand), checked as the agent will read it; None when
    there is none. The controller must then reach the agent with TLS too."""
    try:
        found = yaml.safe_load(text or "") or {}
    except yaml.YAMLError as exc:
        raise RemoteError(f"{host.ssh}: its agent.yaml is not YAML: {exc}") from None
    section = found.get("tls") if isinstance(found, dict) else None
    if section is None:
        return None
    try:
        TlsFiles.model_validate(section)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        raise RemoteError(
            f"{host.ssh}: its agent.yaml's tls: section is not valid ({where}: {problem['msg']});"
            " fix it there (cert, key, and ca for mutual TLS), or remove it"
        ) from None
    if "tls_ca" not in tls:
        raise RemoteError(
            f"{host.ssh}: its agent.yaml has a tls: section, so the agent serves TLS: set"
            " $DBTESTER_AGENT_TLS_CA (the CA that signed its certificate) to reach it"
        )
    return dict(section)


def _unit_text(layout: Layout) -> str:
    template = resources.files("dbtester.remote").joinpath("dbtester-agent.service").read_text()
    return template.format(venv=layout.venv, config=layout.config, home=layout.home)


def _start(
    session: SshSession, host: AgentHost, layout: Layout, systemd: bool, *, restart: bool, say: Say
) -> None:
    if systemd:
        unit = _unit_name(host)
        wrote = session.write(PurePosixPath("/etc/systemd/system") / unit, _unit_text(layout))
        if wrote:
            session.run("systemctl daemon-reload")
        running = _systemd_active(session, host)
        if running and not (restart or wrote):
            say("agent already running, nothing changed")
            return
        verb = "restart" if running else "start"
        say(f"{verb}ing the agent ({unit})")
        session.run(f"systemctl enable -q {unit} && systemctl {verb} {unit}")
        return
    pid = _running_pid(session, layout)
    if pid is not None and not restart:
        say(f"agent already running (pid {pid}), nothing changed")
        return
    if pid is not None:
        say(f"restarting the agent (pid {pid}): its files changed")
        _stop_pid(session, pid, layout)
    say("starting the agent in the background")
    dbtester = layout.venv / "bin" / "dbtester"
    # Its own session (setsid) with every descriptor redirected, so it outlives
    # this SSH connection; the pidfile is the agent's own.
    # The redirections are the subshell's: none of its descriptors may be the SSH
    # channel, or the command would only return when the agent exits.
    session.run(
        f"(cd {_q(layout.base)} && DBTESTER_HOME={_q(layout.home)} exec setsid nohup"
        f" {_q(dbtester)} agent serve --config {_q(layout.config)}"
        f" --pidfile {_q(layout.pidfile)}) >> {_q(layout.out)} 2>&1 < /dev/null &"
    )


def _health_check(
    session: SshSession,
    host: AgentHost,
    layout: Layout,
    token: str,
    systemd: bool,
    tls: Mapping[str, bytes],
) -> str:
    """The agent's version, once it answers over gRPC with the token (and
    TLS, when the controller has a CA for it)."""
    with AgentClient(host.name, token, timeout=10.0, **tls) as client:
        try:
            client.wait_ready(timeout=HEALTH_TIMEOUT_S)
            return client.status(timeout=10.0).agent_version
        except AgentError as exc:
            if systemd:
                log = session.run(f"journalctl -u {_unit_name(host)} -n 20 --no-pager || true")
            else:
                log = session.run(f"tail -n 20 {_q(layout.out)} 2>/dev/null || true")
            raise RemoteError(
                f"{host.ssh}: the agent did not answer on {host.name} within"
                f" {HEALTH_TIMEOUT_S:.0f} s ({exc}); its log ends:\n{log.strip()}"
            ) from None


# --------------------------------------------------------------------------- down


def agents_down(
    hosts: list[AgentHost], options: SshOptions, keep_data: bool = False, say: Say = print
) -> None:
    def one(host: AgentHost) -> None:
        _down_one(host, options, keep_data, _prefixed(say, host))

    _each(hosts, one, "could not take down")


def _down_one(host: AgentHost, options: SshOptions, keep_data: bool, say: Say) -> None:
    with SshSession(host.ssh, options) as session:
        layout = _layout(session, host)
        did = []
        if _uses_systemd(session):
            unit = PurePosixPath("/etc/systemd/system") / _unit_name(host)
            if session.size(unit) is not None:
                session.run(f"systemctl disable -q --now {_unit_name(host)} || true")
                session.run(f"rm -f {_q(unit)} && systemctl daemon-reload")
                did.append("stopped and removed the systemd unit")
        pid = _running_pid(session, layout)
        if pid is not None:
            _stop_pid(session, pid, layout)
            did.append(f"stopped the agent (pid {pid})")
        owned = layout.owned() + ([] if keep_data else [layout.data])
        listed = session.run(
            " ".join(f"[ -e {_q(p)} ] && echo {_q(p)};" for p in owned) + " true"
        ).splitlines()
        present = [p for p in owned if str(p) in listed]
        if present and layout.marker not in present:
            raise RemoteError(
                f"{host.ssh}: {layout.base} has no {layout.marker.name}: not made by"
                " dbtester agents up, so nothing is removed"
            )
        if present:
            session.run(f"rm -rf -- {' '.join(map(_q, present))}")
            session.run(f"rmdir {_q(layout.base)} 2>/dev/null || true")
            did.append(f"removed {len(present)} item(s) under {layout.base}")
        say("; ".join(did) if did else "nothing to do: no agent there")


def _stop_pid(session: SshSession, pid: int, layout: Layout) -> None:
    """SIGTERM (the agent stops its databases first), then SIGKILL its process
    group if it still runs with our config (the PID re-checked, not reused). Its
    databases die with it either way: they carry a parent-death signal."""
    deadline = int(STOP_TIMEOUT_S * 10)
    session.run(
        f"kill -TERM {pid} 2>/dev/null; i=0; while kill -0 {pid} 2>/dev/null &&"
        f" [ $i -lt {deadline} ]; do sleep 0.1; i=$((i+1)); done; true",
        timeout=STOP_TIMEOUT_S + 30,
    )
    if _running_pid(session, layout) == pid:
        session.run(f"kill -KILL -- -{pid} 2>/dev/null || kill -KILL {pid} 2>/dev/null; true")


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class HostStatus:
    host: AgentHost
    ssh: str  # "ok" or "failed"
    process: str  # "systemd", "pid N", "not running", "-"
    agent: str  # "serving" or "not serving"
    version: str = ""
    members: str = ""
    problems: tuple[str, ...] = ()  # in full, naming the host

    @property
    def healthy(self) -> bool:
        return self.agent == "serving" and self.ssh == "ok"


def agents_status(
    hosts: list[AgentHost], options: SshOptions, token: str | None
) -> list[HostStatus]:
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
        return list(pool.map(lambda h: _status_one(h, options, token), hosts))


def _status_one(host: AgentHost, options: SshOptions, token: str | None) -> HostStatus:
    problems: list[str] = []
    try:
        with SshSession(host.ssh, options) as session:
            layout = _layout(session, host)
            if _uses_systemd(session) and _systemd_active(session, host):
                process = "systemd"
            else:
                pid = _running_pid(session, layout)
                process = f"pid {pid}" if pid is not None else "not running"
        ssh = "ok"
    except RemoteError as exc:
        ssh, process = "failed", "-"
        problems.append(str(exc))
    except Exception as exc:  # one host's surprise must not lose the whole table
        ssh, process = "failed", "-"
        problems.append(f"{host.ssh}: {type(exc).__name__}: {exc}")
    # The agent is asked directly too: it may serve while SSH is refused.
    try:
        with AgentClient(host.name, token, timeout=5.0) as client:
            reply = client.status(timeout=5.0)
    except AgentError as exc:
        problems.append(str(exc))
        return HostStatus(host, ssh, process, "not serving", problems=tuple(problems))
    members = members_summary(reply.members)
    return HostStatus(host, ssh, process, "serving", reply.agent_version, members, tuple(problems))


def members_summary(members: Iterable[pb.MemberStatus]) -> str:
    """``2 running, 1 running (isolated)``: members counted by state; an
    isolated member runs, and only the flag tells it is cut off."""
    states = Counter(f"{m.state} (isolated)" if m.isolated else m.state for m in members)
    return ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none"


# --------------------------------------------------------------------------- helpers


def _prefixed(say: Say, host: AgentHost) -> Say:
    return lambda message: say(f"{host.name}: {message}")


def _each(hosts: Iterable[AgentHost], work: Callable[[AgentHost], None], verb: str) -> None:
    hosts = list(hosts)
    failures: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
        futures = {h.name: pool.submit(work, h) for h in hosts}
        for name, future in futures.items():
            try:
                future.result()
            except RemoteError as exc:
                failures.append(str(exc))
            except Exception as exc:  # one host's surprise must not hide the others'
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
    if failures:
        ok = len(hosts) - len(failures)
        raise RemoteError(
            f"{verb} {len(failures)} of {len(hosts)} agent(s) ({ok} fine):\n"
            + "\n".join(f"  - {f}" for f in failures)
        )


def local_installs(hosts: list[AgentHost], reporter: Reporter) -> dict[tuple[str, str], Installed]:
    """Install here (instant when done) what the hosts need, to copy it over."""
    wanted = sorted({pair for h in hosts for pair in h.installs})
    return {(k, v): slowdisk.install_target(k, v, reporter) for k, v in wanted}
