"""Fuzz the command line: every command's argument parsing and input checks,
through the real entry point (``dbtester.cli.main``), with random argv
(``--help`` left out). Exit 0, 1 or 2 with a message, never a traceback, and
nothing started: no child process, no network connection.

Commands that would act once their input is accepted reach a stub instead
(``WouldRun``): a run (``control.run_case``), an install
(``DatabaseKind.install``), an upload (``publish.upload._filesystem``), SSH
(``remote.local_installs`` / ``agents_down`` / ``agents_status``) and serving
(``agent.serve``). Everything before those — click's parsing, loading and
validating the test case, the agent config, the results directory, the
publish URL — runs for real. Guards on process creation and on socket
connections turn anything that slips past them into a failure.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import psutil
import pytest
from hypothesis import strategies as st

from dbtester.cli import cli
from tests.conftest import CONFIGS, LEGACY, ROOT
from tests.fuzz.engine import budget, fuzz
from tests.fuzz.mutate import rarely

pytestmark = pytest.mark.fuzz

CORPUS = Path(__file__).parent / "corpus" / "cli"
HELP = {"-h", "--help"}


class WouldRun(BaseException):  # not an error: the command got this far
    """A command accepted its input and would now act."""


class Guards:
    """Process creation and network connections, recorded and refused."""

    def __init__(self) -> None:
        self.hits: list[str] = []

    def refuse(self, what: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            self.hits.append(f"{what}{args[:3]!r}")
            raise AssertionError(f"the command tried to {what}: {args[:3]!r}")

        return refused


def _stub(what: str) -> Callable[..., Any]:
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise WouldRun(what)

    return stub


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Guards]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(tmp_path)
    for name in ("DBTESTER_AGENT_TOKEN", "AWS_ENDPOINT_URL", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DBTESTER_HOME", str(home / "dbtester"))
    monkeypatch.setenv("DBTESTER_AGENT_TOKEN_FILE", str(home / "agent.token"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    # What commands import lazily, imported before the guards: matplotlib's font
    # manager runs fc-list once per process when it is first imported.
    import dbtester.agent
    import dbtester.control
    import dbtester.publish.upload
    import dbtester.remote
    import dbtester.render
    from dbtester.databases.base import DatabaseKind

    guards = Guards()
    monkeypatch.setattr(subprocess.Popen, "_execute_child", guards.refuse("start a process"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, guards.refuse(f"os.{name}"))
    monkeypatch.setattr(socket.socket, "connect", guards.refuse("connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", guards.refuse("connect"))

    monkeypatch.setattr(dbtester.control, "run_case", _stub("run"))
    monkeypatch.setattr(dbtester.publish.upload, "_filesystem", _stub("upload"))
    monkeypatch.setattr(DatabaseKind, "install", _stub("install"))
    for name in ("local_installs", "agents_down", "agents_status"):
        monkeypatch.setattr(dbtester.remote, name, _stub(f"ssh ({name})"))
    monkeypatch.setattr(dbtester.agent, "serve", _stub("serve"))
    yield guards


# ---------------------------------------------------------------------- the world argv names


GOOD = (CONFIGS / "quickstart.yaml").read_text()
WITH_HOSTS = GOOD.replace(
    "    version: 3.5.17\n", "    version: 3.5.17\n    hosts: [{address: 10.0.0.2}]\n", 1
)


def make_world(root: Path) -> dict[str, list[str]]:
    """Files and directories for argv to name, and the pools of values by kind."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir()
    files: dict[str, str | bytes] = {
        "empty.yaml": "",
        "garbage.bin": bytes(range(256)),
        "syntax.yaml": "title: [\n",
        "invalid.yaml": GOOD.replace("requests:", "reqests:"),
        # numbers YAML reads as infinite or not a number (validate --json once
        # ended in a traceback on them)
        "infinite.yaml": GOOD.replace("  requests: 20000", "  requests: 20000\n  rate: .inf", 1),
        "nan.yaml": GOOD.replace("  requests: 20000", "  requests: 20000\n  rate: .nan", 1),
        "valid.yaml": GOOD,
        "hosts.yaml": WITH_HOSTS,
        "legacy.yaml": (LEGACY / "write-one-client.yaml").read_text(),
        "laughs.yaml": (ROOT / "tests/fuzz/corpus/loader/billion-laughs.yaml").read_text(),
        "agent-bad.yaml": "listen: 127.0.0.1:0\nbogus: 1\n",
        "agent-good.yaml": "listen: 127.0.0.1:0\n",
        "token-open": "t" * 32,
        "token-short": "short",
        "exists.yaml": "x: 1\n",
        "results-corrupt/config.yaml": "title: [\n",
        "results-summary/result.json": "{not json",
        "results-summary/config.yaml": "databases: []\n",
        "results-nodb/config.yaml": "databases: [{id: a}]\n",
        "results-nodb/result.json": '{"schema_version": 2}',
    }
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    (root / "token-short").chmod(0o600)
    (root / "empty-dir").mkdir()
    at = str(root) + "/"
    configs = [at + n for n in ("valid.yaml", "hosts.yaml", "legacy.yaml")]
    broken = [
        at + n
        for n in ("empty.yaml", "garbage.bin", "syntax.yaml", "invalid.yaml", "infinite.yaml")
    ]
    broken.append(at + "nan.yaml")
    missing = [at + "missing.yaml", at + "no/such/dir/x.yaml", "", "-", "."]
    return {
        "config": configs + broken + missing + [at + "laughs.yaml", at + "empty-dir"],
        "new": [
            *(at + n for n in ("new.yaml", "exists.yaml", "empty-dir", "no/such/new.yaml")),
            *("/dev/null", "/dev/full", at + "garbage.bin", ""),
        ],
        "directory": [
            *(at + d for d in ("results-corrupt", "results-summary", "results-nodb")),
            *(at + "empty-dir", at + "missing-dir", at + "valid.yaml", "/", ""),
        ],
        "file": [
            *(at + n for n in ("token-open", "token-short", "missing", "empty-dir")),
            *(at + "garbage.bin", "/dev/null", ""),
        ],
        "agent-config": [at + "agent-bad.yaml", at + "garbage.bin", at + "missing.yaml"],
        "out": [at + "out", at + "empty-dir", at + "valid.yaml", "/proc/nonexistent", ""],
        "targets": [
            *("etcd@3.5.17", "zookeeper@3.8.0", "consul@1.22.0", "etcd@", "@3.5"),
            *("mongodb@1", "etcd@3.5;x", "etcd", "etcd@3.5.17@x", "etcd@../../x"),
        ],
        "url": [
            *("gs://b/p", "s3://b/p", "file:///tmp/x", at + "publish-to", "relative/path"),
            *("ftp://x", "", "gs://", "s3://b", "gs://b/../..", "file://", "https://x/y"),
        ],
        "listen": ["127.0.0.1:0", "localhost:99999", "[::1]:1", "x", "", ":", "10.0.0.1:3500"],
        "float": ["nan", "inf", "-1", "0", "1e309", "abc", "5", "-0"],
        "int": ["0", "1", "256", "257", "-1", "abc", "9" * 30, "1.5"],
        "text": ["etcd-v3.5", "", "../x", "a b", "root", "é", "-x"],
    }


#: which pool each parameter of each command draws its values from
POOLS = {
    "config": "config",
    "old": "config",
    "new": "new",
    "directory": "directory",
    "targets": "targets",
    "kinds": "targets",
    "url": "url",
    "public_url": "url",
    "listen": "listen",
    "config_file": "agent-config",
    "token_file": "file",
    "data_root": "out",
    "heartbeat_timeout": "float",
    "tls_cert": "file",
    "tls_key": "file",
    "tls_ca": "file",
    "pidfile": "out",
    "out": "out",
    "only": "text",
    "workers": "int",
    "identity": "file",
    "known_hosts": "file",
    "ssh_user": "text",
    "wheel": "file",
}


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name)


COMMANDS = sorted(_commands(cli))


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


def _junk(token: str) -> bool:
    """A token a shell can pass (no NUL) that asks for no help (-h, -qh, --help)."""
    short_help = token.startswith("-") and not token.startswith("--") and "h" in token
    return "\x00" not in token and token not in HELP and not short_help


def make_argv(draw: st.DataObject, world: dict[str, list[str]]) -> list[str]:
    path = list(draw.draw(st.sampled_from(COMMANDS), label="command"))
    if path and rarely(draw, "misspell"):
        path[-1] = path[-1][:-1] or "x"
    command = _command(tuple(p for p in path if p in {c for cs in COMMANDS for c in cs}))
    params = [p for p in command.params if p.name]
    options = [p for p in params if isinstance(p, click.Option)]
    arguments = [p for p in params if isinstance(p, click.Argument)]
    argv = list(path)
    junk = st.text(max_size=12).filter(_junk)

    def value(param: click.Parameter) -> str:
        pool = world.get(POOLS.get(param.name or "", "text"), world["text"])
        if rarely(draw, "junk value", 5):
            return draw.draw(junk, label=f"{param.name} junk")
        return draw.draw(st.sampled_from(pool), label=f"{param.name} value")

    # the positional arguments, mostly in order and complete
    for param in arguments:
        count = 1 if param.nargs == 1 else draw.draw(st.integers(0, 3), label="how many")
        if not rarely(draw, "leave out"):
            argv += [value(param) for _ in range(count)]

    def add(option: click.Option) -> None:
        name = draw.draw(st.sampled_from([*option.opts, *option.secondary_opts]), label="as")
        if option.is_flag or rarely(draw, "no value"):
            argv.append(name)
        elif name.startswith("--") and draw.draw(st.booleans(), label="with ="):
            argv.append(f"{name}={value(option)}")
        else:
            argv.extend([name, value(option)])

    # each option of the command, one time in three
    for option in options:
        if rarely(draw, f"{option.name}?", 3):
            add(option)
    for _ in range(draw.draw(st.integers(0, 4), label="extra tokens")):
        kind = draw.draw(
            st.sampled_from(["option", "argument", "junk", "--", "version"]), label="token"
        )
        if kind == "option" and options:
            add(draw.draw(st.sampled_from(options), label="option"))
        elif kind == "argument" and arguments:
            argv.append(value(draw.draw(st.sampled_from(arguments), label="argument")))
        elif kind == "junk":
            argv.append(draw.draw(junk, label="junk"))
        elif kind == "--":
            argv.append("--")
        elif kind == "version":
            argv.insert(0, "--version")
    return argv


def check_argv(argv: list[str], run_cli: Any, guards: Guards) -> None:
    logger = logging.getLogger("dbtester")
    handlers = list(logger.handlers)
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    reached = ""
    try:
        result = run_cli(*argv)
    except WouldRun as stop:
        reached = str(stop)
    finally:
        for handler in set(logger.handlers) - set(handlers):  # `agent serve` logging
            logger.removeHandler(handler)
            handler.close()
    assert not guards.hits, guards.hits
    started = {p.pid for p in psutil.Process().children(recursive=True)} - children
    assert not started, f"child processes started: {started}"
    if reached:
        return
    assert "Traceback" not in result.err, result.err
    assert result.code in (0, 1, 2), (result.code, result.err)
    if result.code:
        assert result.err.strip(), "failed without a word"


@pytest.mark.parametrize(
    "line",
    [x for x in (CORPUS / "argv.txt").read_text().splitlines() if x and not x.startswith("#")],
)
def test_seed_corpus(tmp_path: Path, run_cli: Any, sandbox: Guards, line: str) -> None:
    world = tmp_path / "world"
    make_world(world)
    argv = [a.replace("WORLD/", f"{world}/") for a in line.split("\t")]
    check_argv(argv, run_cli, sandbox)


def test_fuzz_cli(tmp_path: Path, run_cli: Any, sandbox: Guards) -> None:
    def check(draw: st.DataObject) -> None:
        world = make_world(tmp_path / "world")
        argv = make_argv(draw, world)
        check_argv(argv, run_cli, sandbox)

    fuzz("command line", st.data(), check, budget())
