"""The ``dbtester`` command line: commands only (parse, call, print).

Every user-facing failure is a DbtesterError (``dbtester.errors``); it is
caught once, in :func:`main`, printed without a traceback, and turned into its
exit code (0 ok, 1 run failed, 2 bad input, 3 publish failed, 4 bisect
located nothing, 130 Ctrl-C).
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click
import yaml

from dbtester import __version__, slowdisk
from dbtester.config import DatabaseSpec, Loaded, Workload, load_test_case
from dbtester.config.model import MAX_REPEAT
from dbtester.config.search import Search
from dbtester.databases import KINDS
from dbtester.databases.base import AuthKeys
from dbtester.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_NOT_LOCATED,
    EXIT_OK,
    EXIT_PUBLISH_FAILED,
    EXIT_RUN_FAILED,
    BadInputError,
    ConfigError,
    DbtesterError,
    InstallError,
    NotLocatedError,
    RegressionError,
    RemoteError,
    RunFailedError,
)
from dbtester.install import list_installed
from dbtester.util.net import join_host_port
from dbtester.util.paths import dbtester_home, ensure_writable
from dbtester.util.progress import Reporter

if TYPE_CHECKING:
    from dbtester.control import RunOutcome
    from dbtester.history import History
    from dbtester.history.changes import Changes
    from dbtester.remote import AgentHost, SshOptions

__all__ = ["cli", "main"]


def main() -> None:
    try:
        cli.main(standalone_mode=False, prog_name="dbtester")
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as exc:  # bad arguments: click's own message, exit 2
        exc.show()
        sys.exit(EXIT_BAD_INPUT if exc.exit_code == 2 else exc.exit_code)
    except DbtesterError as exc:
        click.echo(f"dbtester: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        # A file-system failure nobody anticipated (disk full, a file where a
        # directory should be): still one line naming the path, not a traceback.
        where = f"{exc.filename}: " if exc.filename is not None else ""
        click.echo(f"dbtester: error: {where}{exc.strerror or exc}", err=True)
        sys.exit(EXIT_RUN_FAILED)


def _epilog(examples: Sequence[str], codes: Mapping[int, str]) -> str:
    """A command's help epilog: examples that run as written, then the exit
    codes it can return. ``\\b`` stops click from rewrapping either block (a
    test parses every example against the command tree)."""
    shown = "\n".join(f"  {example}" for example in examples)
    listed = "\n".join(f"  {code:<3}  {meaning}" for code, meaning in sorted(codes.items()))
    return f"\b\nExamples:\n{shown}\n\n\b\nExit codes:\n{listed}"


#: what the exit codes mean for most commands (dbtester.errors)
_OK = {EXIT_OK: "success"}
_BAD = {EXIT_BAD_INPUT: "bad input: an option, a test case, a file or a directory"}


def _emit_json(document: Mapping[str, Any]) -> None:
    """A ``--json`` document on stdout; strict JSON (no NaN) for any reader."""
    click.echo(json.dumps(document, indent=2, allow_nan=False))


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=_epilog(
        [
            "dbtester init --out mine.yaml",
            "dbtester run configs/quickstart.yaml --repeat 3",
            "dbtester compare results/before results/after",
        ],
        {
            **_OK,
            EXIT_RUN_FAILED: "the run failed, or compare/history found a regression",
            **_BAD,
            EXIT_PUBLISH_FAILED: "publishing failed (the local results are complete)",
            EXIT_INTERRUPTED: "interrupted (Ctrl-C); what ran so far is kept",
        },
    ),
)
@click.version_option(__version__, prog_name="dbtester")
def cli() -> None:
    """Benchmark distributed key-value databases and publish the results.

    Each command's --help shows examples and its exit codes.
    """


# --------------------------------------------------------------------------- validate


def _load(path: str) -> Loaded:
    loaded = load_test_case(path)
    for warning in loaded.warnings:
        click.echo(f"warning: {warning}", err=True)
    return loaded


_JSON_HELP = (
    "Print a JSON document for scripts instead of the text (its schema:"
    " dbtester/schemas/{}.schema.json); errors still go to stderr."
)


@cli.command(
    epilog=_epilog(
        [
            "dbtester validate configs/quickstart.yaml",
            "dbtester validate configs/ycsb-a.yaml --json",
        ],
        {EXIT_OK: "the test case is valid", EXIT_BAD_INPUT: "a problem (each one located)"},
    )
)
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP.format("validate"))
def validate(config: str, as_json: bool) -> None:
    """Check a test case and summarise what would run (exit 2 on any problem)."""
    if as_json:
        _validate_json(config)
        return
    loaded = _load(config)
    case = loaded.case
    origin = " (original dbtester format; see 'dbtester convert')" if loaded.legacy else ""
    click.echo(f"{config}: OK{origin}")
    click.echo(f"  title: {case.title}")
    click.echo(f"  workload: {describe_workload(case.workload, case.search)}")
    click.echo(f"  databases ({len(case.databases)}), run in this order:")
    for db in case.databases:
        click.echo(f"    {describe_database(db)}")
        if db.workload != case.workload:
            click.echo(f"      own workload: {describe_workload(db.workload, case.search)}")
    if case.search is not None:
        click.echo(f"  search: {describe_search(case.search)}")
    what = "trials per database, interleaved"
    if case.interleave == "slices":
        what = (
            f"slices of {case.slice_s:g} s per database, every cluster up at once, a slice"
            " each per round in a random order"
        )
    if case.repeat == "auto":
        budget = f", within {case.time_budget:g} s" if case.time_budget else ""
        metrics = " and ".join(case.stopping_metrics)
        click.echo(
            f"  repeat: auto: {what}, until {metrics} are"
            f" decided (at most {case.max_trials}{budget})"
        )
    elif case.repeat > 1 or case.interleave == "slices":
        click.echo(f"  repeat: {case.repeat} {what}")
    if case.faults:
        click.echo(f"  faults during each load: {'; '.join(f.describe() for f in case.faults)}")
        click.echo(
            f"  a load fails when no request succeeds for {case.fault_recovery:g} s"
            " (fault_recovery)"
        )
    if case.load_hosts:
        named = ", ".join(join_host_port(h.address, h.agent_port) for h in case.load_hosts)
        click.echo(f"  load from {len(case.load_hosts)} load hosts, sharing it: {named}")
    click.echo(f"  publish: {case.publish.url if case.publish else 'no (results stay local)'}")


def _validate_json(config: str) -> None:
    """``validate --json``: the document on stdout, valid or not; a problem
    still exits 2 with its message on stderr."""
    from dbtester.jsonout import invalid_document, validate_document

    try:
        loaded = _load(config)
    except ConfigError as exc:
        _emit_json(invalid_document(config, exc.problems))
        raise
    search = loaded.case.search
    _emit_json(validate_document(config, loaded, lambda w: describe_workload(w, search)))


class RepeatType(click.ParamType[int | Literal["auto"]]):
    """``--repeat``: a number of trials (1 to MAX_REPEAT), or ``auto``."""

    name = "N|auto"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int | Literal["auto"]:
        if value == "auto":
            return "auto"
        try:
            number = int(str(value))
        except ValueError:
            number = 0
        if not 1 <= number <= MAX_REPEAT:
            self.fail(f"{value!r} is not a number from 1 to {MAX_REPEAT}, nor auto", param, ctx)
        return number


def describe_workload(w: Workload, search: Search | None = None) -> str:
    """One line on what the load does (with ``search``: per probe)."""
    requests = "rate x hold_s" if search is not None else f"{w.requests:,}"
    what = w.describe(requests)
    sizes = w.describe_sizes()
    if w.client_steps:
        clients = f"clients in steps {', '.join(map(str, w.client_steps))}"
    else:
        clients = f"{w.clients:,} clients over {w.connections:,} connections"
    pace = f"at {w.rate:,g} requests/s" if w.rate else "as fast as possible"
    if search is not None:
        pace = "at the rates the search offers"
    checked = f"; {w.judged_by.describe()}" if w.judged_by is not None else ""
    return f"{what}; {sizes}; {clients}; {pace}{checked}"


def describe_search(search: Search) -> str:
    return (
        f"the highest rate with p{search.percentile:g} within {search.slo_ms:g} ms, each"
        f" rate held {search.hold_s:g} s, from {search.start_rate:,g}/s to a precision of"
        f" {search.precision:.0%}; at most {search.time_budget:g} s per database and trial"
    )


def describe_database(db: DatabaseSpec) -> str:
    if db.hosts:
        where = f"{len(db.hosts)} hosts ({', '.join(h.address for h in db.hosts)})"
    elif db.endpoints:
        where = f"existing cluster at {', '.join(db.endpoints)} (load only)"
    else:
        where = f"{db.members} member{'s' if db.members != 1 else ''} on this machine"
    if db.tls is True:
        where += ", mutual TLS (certificates made for the run)"
    elif db.tls:
        where += f", TLS (CA {db.tls.ca})"
    if isinstance(db.auth, AuthKeys):
        key, found = db.auth.source
        where += f", as {db.auth.who or 'a token'} ({key} {found})"
    settings = {**db.flags.model_dump(exclude_none=True), **db.client.model_dump()}
    extra = "  " + " ".join(f"{k}={v}" for k, v in settings.items()) if settings else ""
    return f"{db.id:<20} {db.kind + ' ' + db.version:<18} {where}{extra}"


# --------------------------------------------------------------------------- convert


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)


@cli.command(
    epilog=_epilog(
        [
            "dbtester convert tests/fixtures/legacy/write-one-client.yaml write-one-client.yaml",
            "dbtester convert old.yaml new.yaml --force",
        ],
        {
            EXIT_OK: "NEW written",
            EXIT_RUN_FAILED: "NEW could not be written (e.g. a full disk)",
            EXIT_BAD_INPUT: "OLD has problems, or NEW exists without --force",
        },
    )
)
@click.argument("old", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False, writable=True))
@click.option("--force", is_flag=True, help="Overwrite NEW if it exists.")
def convert(old: str, new: str, force: bool) -> None:
    """Convert a test case from the original dbtester's format to dbtester's."""
    loaded = _load(old)
    target = Path(new)
    if target.exists() and not force:
        raise BadInputError(f"{new} exists; pass --force to overwrite it, or choose another NEW")
    header = [f"# Converted by dbtester {__version__} from {old}"]
    if loaded.warnings:
        header.append("# Conversion notes:")
        header += [f"#   line {w.line}: {w.message}" for w in loaded.warnings]
    body = yaml.dump(loaded.case.to_raw(), Dumper=_Dumper, sort_keys=False, width=100)
    try:
        target.write_text("\n".join(header) + "\n" + body)
    except OSError as exc:  # a full disk reports no file name of its own
        raise DbtesterError(f"{new}: cannot write: {exc.strerror or exc}") from None
    click.echo(
        f"wrote {new} ({len(loaded.case.databases)} databases, {len(loaded.warnings)} notes)"
    )


# --------------------------------------------------------------------------- init


@cli.command(
    "init",
    epilog=_epilog(
        [
            "dbtester init",
            "dbtester init --out mine.yaml",
            "dbtester init --kind etcd@3.6.8 --kind zookeeper@3.8.0 --kind consul@1.22.0"
            " --out three.yaml",
            "dbtester init --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out cluster.yaml --force",
        ],
        {
            EXIT_OK: "written (to stdout without --out)",
            EXIT_RUN_FAILED: "--out could not be written (e.g. a full disk)",
            EXIT_BAD_INPUT: "an unknown kind, a bad version or host, or --out exists"
            " without --force",
        },
    ),
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    metavar="KIND@VERSION",
    help="A database to compare (repeatable), e.g. zookeeper@3.8.0 [etcd@3.6.8].",
)
@click.option(
    "--hosts",
    metavar="A,B,C",
    help="Run each database's members on these machines (one each, through their"
    " agents) [this machine].",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the test case to this file [stdout].",
)
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
def init_command(kinds: tuple[str, ...], hosts: str | None, out: Path | None, force: bool) -> None:
    """Write a starter test case that validates as written; nothing is asked.

    Then: `dbtester validate FILE`, `dbtester run FILE`.
    """
    from dbtester.init import parse_hosts, starter_test_case, write_starter

    try:
        targets = [_parse_target(target) for target in kinds]
    except click.BadParameter as exc:
        exc.param_hint = "'--kind'"  # the message then names the option
        raise
    text = starter_test_case(targets, parse_hosts(hosts) if hosts is not None else ())
    if out is None:
        click.echo(text, nl=False)
        return
    write_starter(out, text, force)
    click.echo(
        f"wrote {out}; check it with `dbtester validate {out}`, run it with `dbtester run {out}`",
        err=True,
    )


# --------------------------------------------------------------------------- install


def _parse_target(target: str) -> tuple[str, str]:
    kind, sep, version = target.partition("@")
    if not sep or not version:
        raise click.BadParameter(f"expected KIND@VERSION (e.g. etcd@3.5.17), got {target!r}")
    if kind not in KINDS:
        raise click.BadParameter(f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
    from dbtester.config.model import version_hint

    if hint := version_hint(version):
        raise click.BadParameter(hint)
    return kind, version


@cli.command(
    epilog=_epilog(
        [
            "dbtester install etcd@3.6.8 zookeeper@3.8.0",
            "dbtester install --for configs/quickstart.yaml",
            "dbtester install --list",
        ],
        {
            EXIT_OK: "installed (or already there)",
            EXIT_RUN_FAILED: "an unexpected failure (e.g. the disk)",
            EXIT_BAD_INPUT: "a bad KIND@VERSION or test case, or no way to obtain a binary",
        },
    )
)
@click.argument("targets", nargs=-1, metavar="KIND@VERSION...")
@click.option("--list", "show", is_flag=True, help="Show what is installed.")
@click.option(
    "--for",
    "config",
    type=click.Path(dir_okay=False),
    help="Install every database version a test case needs.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only errors.")
def install(targets: tuple[str, ...], show: bool, config: str | None, quiet: bool) -> None:
    """Install database binaries into $DBTESTER_HOME (default ~/.cache/dbtester).

    A version already installed returns at once.
    """
    if show:
        _show_installed()
        return
    wanted = [_parse_target(t) for t in targets]
    if config:
        case = _load(config).case
        wanted += [
            (db.kind, version)
            for db in case.databases
            if not db.endpoints
            for version in case.versions_of(db)
        ]
        if slowdisk.needed(case):
            wanted.append((slowdisk.KIND, slowdisk.VERSION))
    if not wanted:
        raise click.UsageError("name KIND@VERSION, or pass --for CONFIG or --list")
    reporter = Reporter(quiet=quiet)
    failures = []
    for kind, version in dict.fromkeys(wanted):
        try:
            done = slowdisk.install_target(kind, version, reporter)
        except InstallError as exc:
            failures.append(str(exc))
            continue
        if not quiet:
            click.echo(f"{kind}@{version}: installed at {done.root} (from {done.source})")
    if failures:
        raise InstallError("\n".join(failures))


def _show_installed() -> None:
    items = list_installed()
    if not items:
        click.echo(f"nothing installed in {dbtester_home()}")
        return
    click.echo(f"installed in {dbtester_home()}:")
    for item in items:
        click.echo(f"  {item.kind + '@' + item.version:<24} {item.installed_at}  {item.source}")


# --------------------------------------------------------------------------- agent


@cli.group()
def agent() -> None:
    """The agent that runs databases on a server machine."""


@agent.command(
    "serve",
    epilog=_epilog(
        [
            "dbtester agent serve --listen 0.0.0.0:3500 --token-file agent.token",
            "dbtester agent serve --config agents/agent.example.yaml --pidfile agent.pid",
        ],
        {
            EXIT_OK: "stopped by SIGTERM or SIGINT (its databases stopped first)",
            EXIT_RUN_FAILED: "the agent could not start: the port is taken, another agent"
            " holds the pidfile, a token or TLS file cannot be read",
            EXIT_BAD_INPUT: "a bad option or agent config",
        },
    ),
)
@click.option(
    "--listen", default=None, help="HOST:PORT to listen on [127.0.0.1:3500]; port 0 picks one."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Agent config YAML (see agents/agent.example.yaml).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File holding the bearer token every call must carry (mode 0600).",
)
@click.option(
    "--data-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where members' data, metrics and logs go [$DBTESTER_HOME/agent].",
)
@click.option(
    "--heartbeat-timeout", type=float, help="Stop databases after this many silent seconds [60]."
)
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--tls-key", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--tls-ca",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Require client certificates signed by this CA (mutual TLS).",
)
@click.option(
    "--pidfile",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the agent's PID here while it serves (refuses to start a second agent).",
)
def agent_serve(
    listen: str | None,
    config_file: Path | None,
    token_file: Path | None,
    data_root: Path | None,
    heartbeat_timeout: float | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_ca: Path | None,
    pidfile: Path | None,
) -> None:
    """Serve the agent until SIGTERM/SIGINT (which stop its databases first)."""
    from dbtester.agent import load_agent_config, serve
    from dbtester.agent.pidfile import pidfile as holding_pidfile

    if bool(tls_cert) != bool(tls_key):
        raise click.UsageError("--tls-cert and --tls-key go together")
    tls = {"cert": tls_cert, "key": tls_key, "ca": tls_ca} if tls_cert else None
    config = load_agent_config(
        config_file,
        listen=listen,
        token_file=token_file,
        data_root=data_root,
        heartbeat_timeout_s=heartbeat_timeout,
        tls=tls,
    )
    ensure_writable(config.data_root)  # before the log file goes there
    _agent_logging(config.data_root)
    with holding_pidfile(pidfile):
        serve(config)


def _agent_logging(root: Path) -> None:
    import logging

    root.mkdir(parents=True, exist_ok=True)
    handlers: list[logging.Handler] = [
        logging.StreamHandler(sys.stderr),
        logging.FileHandler(root / "agent.log"),
    ]
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    logger = logging.getLogger("dbtester")
    for handler in handlers:
        handler.setFormatter(fmt)
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


# --------------------------------------------------------------------------- run, analyze

_NO_CHARTS_HELP = (
    "Skip the SVG charts and report.html: the table, README, result.json and Parquet"
    " only (most of rendering's time; `dbtester analyze DIR` draws them later)."
)


@cli.command(
    epilog=_epilog(
        [
            "dbtester run configs/quickstart.yaml",
            "dbtester run configs/quickstart.yaml --repeat 3 --out results/quickstart-3",
            "dbtester run configs/etcd-zookeeper-consul.yaml --only etcd-v3.5 --workers 2",
            "dbtester run configs/quickstart.yaml --repeat auto",
            "dbtester run configs/quickstart.yaml --no-charts",
        ],
        {
            **_OK,
            EXIT_RUN_FAILED: "a database failed (every result is kept)",
            EXIT_BAD_INPUT: "a bad test case or option, or --out exists and is not empty",
            EXIT_PUBLISH_FAILED: "publishing failed (the local results are complete)",
            EXIT_INTERRUPTED: "interrupted (Ctrl-C); what ran so far is kept and rendered",
        },
    )
)
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Results directory, new or empty [results/<time>-<title>].",
)
@click.option("--only", multiple=True, metavar="ID", help="Run only this database (repeatable).")
@click.option("--local", is_flag=True, help="Run every database on this machine, ignoring hosts.")
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    help="Load engine threads [1: on a 2-core machine one measured best].",
)
@click.option(
    "--repeat",
    type=RepeatType(),
    help="Trials per database, interleaved, each on a fresh cluster; `auto`: until the"
    " differences are decided [the test case's `repeat`, else 1].",
)
@click.option("--no-charts", is_flag=True, help=_NO_CHARTS_HELP)
def run(
    config: str,
    out: Path | None,
    only: tuple[str, ...],
    local: bool,
    workers: int | None,
    repeat: int | Literal["auto"] | None,
    no_charts: bool,
) -> None:
    """Run a test case: each database in turn, then the table, charts and README.

    With `publish:` in the test case the results are then uploaded (exit 3 if that
    fails; the local results are complete). A run where a database failed, or one
    narrowed by --only or --local, is not published: `dbtester publish` does it on
    request.
    """
    from dbtester.control import default_out, run_case, select
    from dbtester.publish import publish, retry_command

    loaded = _load(config)
    loaded = Loaded(select(loaded.case, only, local), loaded.source, loaded.legacy, loaded.warnings)
    target = loaded.case.publish
    if no_charts and target is not None:
        raise BadInputError(
            f"{config} publishes its results, and a published run carries its charts and"
            " report.html: drop --no-charts"
        )
    outcome = run_case(
        loaded,
        out or default_out(loaded.case),
        workers=workers,
        repeat=repeat,
        charts=not no_charts,
    )
    if target is None:
        print_outcome(outcome)
        return
    by_hand = retry_command(outcome.out, target.url, target.public_url)
    try:
        print_outcome(outcome)
    except RunFailedError as exc:
        # A failed run's figures are not the comparison the bucket is for.
        raise RunFailedError(f"{exc}\nNot published; to publish anyway: {by_hand}") from None
    if only or local:
        # Part of a test case, or a local stand-in for its hosts, would overwrite
        # the real run's table and README.
        why = "--only ran part of the test case" if only else "--local ignored its hosts"
        click.echo(f"not published ({why}); to publish: {by_hand}", err=True)
        return
    done = publish(outcome.out, target.url, public_url=target.public_url)
    click.echo(f"README: {done.readme}", err=True)
    if done.report:
        click.echo(f"report: {done.report}", err=True)


def print_outcome(outcome: RunOutcome) -> None:
    """The table on stdout, where the results are on stderr; RunFailedError
    (exit 1) naming every database that failed."""
    _print_rendered(outcome.table, outcome.comparison, outcome.notes, outcome.headline)
    click.echo(f"results: {outcome.out}", err=True)
    if outcome.report is not None:
        click.echo(f"report: {outcome.report}", err=True)
    failed = outcome.failed
    if failed:
        lines = "\n".join(f"  {k}: {v}" for k, v in failed.items())
        raise RunFailedError(
            f"{len(failed)} of {len(outcome.databases)}"
            f" databases failed (results kept in {outcome.out}):\n{lines}"
        )


@cli.command(
    "analyze",
    epilog=_epilog(
        ["dbtester analyze results/quickstart-3"],
        {
            **_OK,
            EXIT_RUN_FAILED: "the files could not be written (e.g. a full disk)",
            EXIT_BAD_INPUT: "DIRECTORY is not a results directory dbtester can read",
        },
    ),
)
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--no-charts", is_flag=True, help=_NO_CHARTS_HELP)
def analyze_command(directory: Path, no_charts: bool) -> None:
    """Re-render the table, charts, README and report.html of a results directory
    from its raw data."""
    from dbtester.render import render

    rendered = render(directory, charts=not no_charts)
    _print_rendered(rendered.table, rendered.comparison, rendered.analysis.notes, rendered.headline)
    if rendered.report is not None:
        click.echo(f"report: {rendered.report}", err=True)


def _print_rendered(
    table: str, comparison: str, notes: Sequence[str], opening: Sequence[str] = ()
) -> None:
    """The table and the comparison on stdout, as saved (summary.txt, then
    comparison.txt); notes under them on stderr, then what differed: after a
    long table, the answer is the last thing on the screen but the paths."""
    click.echo(table, nl=False)
    if comparison:
        click.echo()
        click.echo(comparison, nl=False)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    for line in opening:
        click.echo(f"summary: {line}", err=True)


_METRIC_HELP = (
    "A table row to {} (repeatable) [AVG-THROUGHPUT, Latency p50, Latency p99,"
    " SERVER-MAX-CPU-USAGE, SERVER-MAX-MEMORY-USAGE]; --list-metrics shows them all."
)


def _list_metrics() -> None:
    """``--list-metrics``: one row per line, its name then how it is judged."""
    from dbtester.compare import describe_metrics

    described = describe_metrics()
    width = max(len(name) for name, _ in described)
    for name, words in described:
        click.echo(f"{name:<{width}}  {words}")


def _list_metrics_option(command: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--list-metrics",
        is_flag=True,
        help="Print every metric --metric accepts, one per line, and exit.",
    )(command)


@cli.command(
    "compare",
    epilog=_epilog(
        [
            "dbtester compare results/before results/after",
            "dbtester compare results/before results/after --threshold 10 --metric 'Latency p99'",
            "dbtester compare results/before results/after --alpha 0.01",
            "dbtester compare results/before results/after --json",
            "dbtester compare --list-metrics",
        ],
        {
            EXIT_OK: "no metric got significantly worse beyond the threshold",
            EXIT_RUN_FAILED: "a regression: a metric got significantly worse beyond it",
            EXIT_BAD_INPUT: "bad input, or the runs were measured on different machines",
        },
    ),
)
@click.argument(
    "dir_a", required=False, type=click.Path(file_okay=False, exists=True, path_type=Path)
)
@click.argument(
    "dir_b", required=False, type=click.Path(file_okay=False, exists=True, path_type=Path)
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, min_open=False),
    default=5.0,
    show_default=True,
    help="A significant change for the worse larger than this many % is a regression.",
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.05,
    show_default=True,
    help="A change is significant where Welch's p-value is below this. A gate over k"
    " metrics raises a false alarm on identical runs up to k times as often.",
)
@click.option(
    "--metric", "metrics", multiple=True, metavar="NAME", help=_METRIC_HELP.format("compare")
)
@click.option(
    "--across-environments",
    is_flag=True,
    help="Give verdicts even when the two runs were measured on different machines"
    " (CPU model, cores, memory or kernel).",
)
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP.format("compare"))
@_list_metrics_option
def compare_command(
    dir_a: Path | None,
    dir_b: Path | None,
    threshold: float,
    alpha: float,
    metrics: tuple[str, ...],
    across_environments: bool,
    as_json: bool,
    list_metrics: bool,
) -> None:
    """Compare two results directories, database by database (matched by id).

    Exit 0 when no metric got significantly worse in DIR_B by more than the
    threshold, 1 when one did (a regression gate for CI), 2 for bad input or
    when the two runs were measured on different machines (no verdict:
    --across-environments gives one anyway).
    """
    from dbtester.compare import compare_directories

    if list_metrics:
        _list_metrics()
        return
    if dir_a is None or dir_b is None:
        raise click.UsageError("give two results directories, DIR_A and DIR_B (or --list-metrics)")
    comparison = compare_directories(
        dir_a,
        dir_b,
        threshold_pct=threshold,
        metrics=metrics,
        across_environments=across_environments,
        alpha=alpha,
    )
    if as_json:
        from dbtester.jsonout import compare_document

        _emit_json(compare_document(comparison))
    else:
        click.echo(comparison.render(), nl=False)
    regressions = comparison.regressions
    if regressions:
        lines = "\n".join(
            f"  {c.database} {c.change.metric.row}: {c.change.change_pct:+.1f}%"
            f" ({c.change.verdict}, p={c.change.p_value:.3f})"
            for c in regressions
        )
        raise RegressionError(
            f"{len(regressions)} regression(s) beyond {threshold:g}% in {dir_b}:\n{lines}"
        )


@cli.command(
    "history",
    epilog=_epilog(
        [
            "dbtester history results/",
            "dbtester history results/ --metric AVG-THROUGHPUT --out history/",
            "dbtester history s3://my-bucket/dbtester --check --baseline-runs 5 --threshold 10",
            "dbtester history results/ --check --json",
            "dbtester history --list-metrics",
        ],
        {
            **_OK,
            EXIT_RUN_FAILED: "with --check: a database's newest run regressed",
            EXIT_BAD_INPUT: "bad input, or with --check: a newest run measured on other"
            " machines than its baseline",
        },
    ),
)
@click.argument("source", required=False)
@click.option(
    "--database",
    "databases",
    multiple=True,
    metavar="ID",
    help="Only this database id (repeatable).",
)
@click.option(
    "--metric", "metrics", multiple=True, metavar="NAME", help=_METRIC_HELP.format("show and check")
)
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    metavar="DATE",
    help="Only runs started on or after DATE (YYYY-MM-DD, UTC).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Write the table (history.txt, history.csv) and one trend chart per metric here.",
)
@click.option("--check", is_flag=True, help="Gate: exit 1 if a database's newest run regressed.")
@click.option("--baseline", metavar="RUN_ID", help="With --check: compare against this run only.")
@click.option(
    "--baseline-runs",
    type=click.IntRange(1),
    default=5,
    show_default=True,
    help="With --check: the baseline is this many runs before the newest.",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, min_open=False),
    default=5.0,
    show_default=True,
    help="With --check: a significant change for the worse larger than this many % is a"
    " regression.",
)
@click.option(
    "--across-environments",
    is_flag=True,
    help="With --check: check a newest run measured on other hardware than its baseline"
    " (otherwise no verdict, exit 2).",
)
@click.option(
    "--changes",
    is_flag=True,
    help="Find where each metric's series of runs shifted (change points), per database and"
    " machine; with --check, gate on them instead of the fixed baseline window.",
)
@click.option(
    "--recent",
    type=click.IntRange(1),
    default=5,
    show_default=True,
    help="With --check --changes: a change for the worse starting in one of each database's"
    " newest N runs is a regression.",
)
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP.format("history"))
@_list_metrics_option
def history_command(
    source: str | None,
    databases: tuple[str, ...],
    metrics: tuple[str, ...],
    since: datetime.datetime | None,
    out: Path | None,
    check: bool,
    baseline: str | None,
    baseline_runs: int,
    threshold: float,
    across_environments: bool,
    changes: bool,
    recent: int,
    as_json: bool,
    list_metrics: bool,
) -> None:
    """Every run under SOURCE (a results folder, file://, gs:// or s3:// prefix):
    a table of runs x metrics per database and version, read with DuckDB.

    With --check, each database's newest run is compared with its baseline
    (Welch's t-test over trials, or a one-trial run against the baseline's
    spread): exit 0 when nothing regressed beyond the threshold, 1 when
    something did (a nightly gate), 2 for bad input. With --changes, the runs
    where each metric shifted are named; --check --changes gates on a shift
    for the worse in the newest runs.
    """
    from dbtester.compare import check_metrics
    from dbtester.history import check_history, load_history, machines_of, open_source
    from dbtester.history.changes import find_changes
    from dbtester.history.output import render_table, write_outputs

    if list_metrics:
        _list_metrics()
        return
    if source is None:
        raise click.UsageError(
            "give SOURCE, a results folder or a bucket prefix (or --list-metrics)"
        )
    opened = open_source(source)
    found = load_history(opened, databases=databases, since=since.date() if since else None)
    # unnamed: the default rows that some run has (a search's, a watch load's)
    rows = check_metrics(metrics) if metrics else found.measured(check_metrics(()))
    if not as_json:
        click.echo(render_table(found, rows), nl=False)
    if found.converted:
        click.echo(
            f"note: {found.converted} run(s) from before Parquet read from result.json", err=True
        )
    shifts = find_changes(found, rows, machines_of(opened, found)) if changes else None
    if out is not None:
        write_outputs(found, rows, out, shifts)
        # stdout is the JSON document's alone
        click.echo(f"charts: {out / 'charts'}", err=as_json)
    if shifts is not None and not as_json:
        click.echo()
        click.echo(shifts.render(), nl=False)
    if check and shifts is not None:
        _gate_on_changes(found, shifts, recent, threshold, source, as_json, rows)
        return
    verdict = None
    if check:
        verdict = check_history(
            found,
            rows,
            threshold_pct=threshold,
            baseline_runs=baseline_runs,
            baseline_id=baseline,
            machines=machines_of(opened, found),
            across_environments=across_environments,
        )
    if as_json:
        from dbtester.jsonout import history_document

        _emit_json(history_document(found, rows, verdict, shifts))
    elif verdict is not None:
        click.echo()
        click.echo(verdict.render(), nl=False)
    if verdict is not None and verdict.regressions:
        lines = "\n".join(
            f"  {v.database} {v.change.metric.row}: {v.change.change_pct:+.1f}% in {v.newest}"
            for v in verdict.regressions
        )
        raise RegressionError(
            f"{len(verdict.regressions)} regression(s) beyond {threshold:g}% in {source}:\n{lines}"
        )


def _gate_on_changes(
    history: History,
    shifts: Changes,
    recent: int,
    threshold: float,
    source: str,
    as_json: bool,
    rows: Sequence[str],
) -> None:
    """``history --check --changes``: RegressionError when a shift for the
    worse beyond ``threshold`` starts in a database's newest ``recent`` runs."""
    regressions = shifts.regressions(history, recent, threshold)
    if as_json:
        from dbtester.jsonout import history_document

        _emit_json(history_document(history, rows, None, shifts, (recent, threshold)))
    if regressions:
        lines = "\n".join(f"  {p.line()}" for p in regressions)
        raise RegressionError(
            f"{len(regressions)} shift(s) for the worse beyond {threshold:g}% in the newest"
            f" {recent} runs of {source}:\n{lines}"
        )


@cli.command(
    "bisect",
    epilog=_epilog(
        [
            "dbtester bisect configs/quickstart.yaml --kind etcd --good 3.5.17 --bad 3.6.8"
            " --metric SERVER-MAX-MEMORY-USAGE",
            "dbtester bisect configs/quickstart.yaml --good 3.5.17 --bad 3.6.8"
            " --metric AVG-THROUGHPUT --versions 3.5.21,3.6.0,3.6.4",
        ],
        {
            EXIT_OK: "the first version with the change is named",
            EXIT_RUN_FAILED: "a run failed (the good or the bad end could not run)",
            EXIT_BAD_INPUT: "bad input: a test case, an option, a folder of another bisect",
            EXIT_NOT_LOCATED: "no version named: the change did not reproduce between"
            " the ends, or a step stayed undecided (the range left is printed)",
            EXIT_INTERRUPTED: "interrupted; the same command again resumes",
        },
    ),
)
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--good", required=True, metavar="VERSION", help="A version without the change.")
@click.option("--bad", required=True, metavar="VERSION", help="A later version with it.")
@click.option(
    "--metric",
    required=True,
    metavar="NAME",
    help="The table row that changed (AVG-THROUGHPUT, 'Latency p99', ...;"
    " `dbtester compare --list-metrics` lists them).",
)
@click.option(
    "--kind",
    metavar="KIND",
    help="The database kind whose versions vary [the test case's only kind];"
    " its first database in the test case gives the settings.",
)
@click.option(
    "--versions",
    metavar="V1,V2,...",
    help="The versions between the ends, oldest first, instead of the released ones"
    " listed by the Go module proxy or Maven Central and those installed.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="The bisect folder: every step's results and bisect.json; the same folder"
    " again resumes [results/bisect-<title>-<kind>-<metric>].",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    help="Load engine threads, as for `run`.",
)
def bisect_command(
    config: str,
    good: str,
    bad: str,
    metric: str,
    kind: str | None,
    versions: str | None,
    out: Path | None,
    workers: int | None,
) -> None:
    """Find the first released version between GOOD and BAD whose METRIC differs
    from GOOD's the way BAD's does.

    The two ends are compared first (the change must reproduce); then the
    versions between are halved, each step a `repeat: auto` run of the test
    case with the middle version against GOOD, until the first changed version
    is named with its interval and p-value. Every step is kept in the bisect
    folder; the same command again reuses the finished steps.
    """
    from dbtester.bisect import BisectOptions, bisect
    from dbtester.bisect.search import Found

    given = tuple(v.strip() for v in versions.split(",") if v.strip()) if versions else ()
    options = BisectOptions(good, bad, metric, kind, given, workers)
    outcome = bisect(_load(config), options, out)
    click.echo(outcome.table, nl=False)
    click.echo(f"bisect: {outcome.folder}", err=True)
    if not isinstance(outcome.decision, Found):
        raise NotLocatedError(outcome.conclusion)
    click.echo(outcome.conclusion)


@cli.command(
    "publish",
    epilog=_epilog(
        [
            "dbtester publish results/quickstart-3 gs://my-bucket/dbtester/quickstart",
            "dbtester publish results/quickstart-3 s3://my-bucket/quickstart"
            " --public-url https://my-bucket.s3.amazonaws.com/quickstart",
            "dbtester publish results/quickstart-3 /srv/www/quickstart",
        ],
        {
            EXIT_OK: "every file uploaded",
            EXIT_BAD_INPUT: "DIR or URL cannot be used",
            EXIT_PUBLISH_FAILED: "an upload failed; the same command again completes it",
        },
    ),
)
@click.argument(
    "directory", metavar="DIR", type=click.Path(file_okay=False, exists=True, path_type=Path)
)
@click.argument("url")
@click.option(
    "--public-url",
    metavar="BASE",
    help="Base URL readers fetch the files from [the bucket's public URL].",
)
def publish_command(directory: Path, url: str, public_url: str | None) -> None:
    """Upload the results directory DIR to URL: gs://BUCKET/PREFIX,
    s3://BUCKET/PREFIX, file:///PATH or /PATH.

    Every file goes to URL/<its path in DIR>; the published README's chart links
    point at BASE/charts/. Local files are never changed. Prints where the README
    is (and, on stderr, report.html); exit 3 if an upload fails, and the same
    command again completes it.
    """
    from dbtester.publish import publish

    done = publish(directory, url, public_url=public_url)
    click.echo(done.readme)
    if done.report:
        click.echo(f"report: {done.report}", err=True)


# --------------------------------------------------------------------------- agents (SSH)


def _ssh_options(
    identity: Path | None, known_hosts: Path | None, accept_new_host_keys: bool
) -> SshOptions:
    from dbtester.remote import SshOptions

    return SshOptions(
        identity=identity,
        known_hosts=known_hosts,
        accept_new_host_keys=accept_new_host_keys,
        warn=lambda message: click.echo(message, err=True),
    )


def _agent_hosts(config: str, ssh_user: str | None) -> list[AgentHost]:
    from dbtester.remote import agent_hosts

    hosts = agent_hosts(_load(config).case, ssh_user)
    if not hosts:
        # Bad input (exit 2), not a remote failure: nothing was tried.
        raise BadInputError(
            f"{config} has no `hosts:`, so there are no agents: its databases run on this"
            f" machine. Run it locally with `dbtester run {config}`, or add hosts to its"
            " databases (`dbtester init --hosts A,B,C` writes an example)"
        )
    return hosts


def _ssh_flags(command: Callable[..., None]) -> Callable[..., None]:
    options = [
        click.option(
            "-i",
            "--identity",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Private key file [the SSH agent, then ~/.ssh/id_*].",
        ),
        click.option(
            "--known-hosts",
            type=click.Path(dir_okay=False, path_type=Path),
            help="known_hosts file to check host keys against [~/.ssh/known_hosts].",
        ),
        click.option(
            "--accept-new-host-keys",
            is_flag=True,
            help="Trust unknown host keys on first use (with a warning); changed keys"
            " are still refused.",
        ),
        click.option("--ssh-user", help="SSH user where a host has no ssh_user [$USER]."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@cli.group()
def agents() -> None:
    """Agents on the test case's hosts, over SSH (key authentication)."""


#: `agents up|down|status` share their examples' test case: one with hosts
_HOSTS_CASE = "cluster.yaml"
_AGENTS_BAD = {
    EXIT_BAD_INPUT: "bad input, or a test case without hosts (run it with `dbtester run`)"
}


@agents.command(
    "up",
    epilog=_epilog(
        [
            f"dbtester init --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --out {_HOSTS_CASE}",
            f"dbtester agents up {_HOSTS_CASE} -i ~/.ssh/id_ed25519 --ssh-user ubuntu",
            f"dbtester agents up {_HOSTS_CASE} --accept-new-host-keys --no-systemd",
        ],
        {
            EXIT_OK: "every agent is up",
            EXIT_RUN_FAILED: "SSH or the deployment failed on a host (the message names it)",
            **_AGENTS_BAD,
        },
    ),
)
@click.argument("config", type=click.Path(dir_okay=False))
@_ssh_flags
@click.option(
    "--wheel",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="dbtester wheel to install [built from this source tree].",
)
@click.option(
    "--no-systemd",
    is_flag=True,
    help="Run agents as background processes with a pidfile even where systemd runs.",
)
def agents_up_command(
    config: str,
    identity: Path | None,
    known_hosts: Path | None,
    accept_new_host_keys: bool,
    ssh_user: str | None,
    wheel: Path | None,
    no_systemd: bool,
) -> None:
    """Install, configure and start an agent on every host; idempotent."""
    from dbtester.control.agents import ensure_remote_token, remote_tls
    from dbtester.remote import agents_up, build_wheelhouse, local_installs

    hosts = _agent_hosts(config, ssh_user)
    say = click.echo
    tls = remote_tls()  # before anything is copied: a bad path is bad input
    installs = local_installs(hosts, Reporter(sys.stderr))
    wheelhouse = build_wheelhouse(wheel, say)
    token = ensure_remote_token(say)
    options = _ssh_options(identity, known_hosts, accept_new_host_keys)
    agents_up(hosts, wheelhouse, token, options, installs, say, systemd=not no_systemd, tls=tls)
    click.echo(f"{len(hosts)} agent(s) up; `dbtester run {config}` uses them")


@agents.command(
    "down",
    epilog=_epilog(
        [f"dbtester agents down {_HOSTS_CASE}", f"dbtester agents down {_HOSTS_CASE} --keep-data"],
        {
            EXIT_OK: "every agent stopped and removed",
            EXIT_RUN_FAILED: "SSH or the removal failed on a host (the message names it)",
            **_AGENTS_BAD,
        },
    ),
)
@click.argument("config", type=click.Path(dir_okay=False))
@_ssh_flags
@click.option("--keep-data", is_flag=True, help="Keep the agents' data directories.")
def agents_down_command(
    config: str,
    identity: Path | None,
    known_hosts: Path | None,
    accept_new_host_keys: bool,
    ssh_user: str | None,
    keep_data: bool,
) -> None:
    """Stop every host's agent (and its databases) and remove what `up` put there."""
    from dbtester.remote import agents_down

    hosts = _agent_hosts(config, ssh_user)
    options = _ssh_options(identity, known_hosts, accept_new_host_keys)
    agents_down(hosts, options, keep_data, click.echo)


@agents.command(
    "status",
    epilog=_epilog(
        [
            f"dbtester agents status {_HOSTS_CASE}",
            f"dbtester agents status {_HOSTS_CASE} -i key.pem",
        ],
        {
            EXIT_OK: "every agent is serving",
            EXIT_RUN_FAILED: "a host has a problem (SSH refused, agent not serving)",
            **_AGENTS_BAD,
        },
    ),
)
@click.argument("config", type=click.Path(dir_okay=False))
@_ssh_flags
def agents_status_command(
    config: str,
    identity: Path | None,
    known_hosts: Path | None,
    accept_new_host_keys: bool,
    ssh_user: str | None,
) -> None:
    """Show each host's agent: SSH, process, gRPC health, version, members.
    Exits 1 when any host has a problem (SSH refused, agent not serving)."""
    from dbtester.control.agents import remote_token
    from dbtester.remote import agents_status

    hosts = _agent_hosts(config, ssh_user)
    options = _ssh_options(identity, known_hosts, accept_new_host_keys)
    rows = agents_status(hosts, options, remote_token())
    header = ("AGENT", "SSH", "PROCESS", "AGENT STATE", "VERSION", "MEMBERS")
    table = [header] + [
        (s.host.name, s.ssh, s.process, s.agent, s.version or "-", s.members or "-") for s in rows
    ]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for problem in (p for s in rows for p in s.problems):
        click.echo(f"  - {problem}")
    down = [s.host.name for s in rows if not s.healthy]
    if down:
        raise RemoteError(f"{len(down)} of {len(rows)} agent(s) with problems: {', '.join(down)}")
