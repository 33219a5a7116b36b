"""Writes the reference pages under ``docs/reference/`` from the code: the
test-case keys from the pydantic model, every command from the click tree,
the results schema's history from ``dbtester/results/schema.py``, and the
``--json`` documents' schemas from ``dbtester/schemas/``.

The pages are committed, so they read in the repository view as on the site;
``tests/unit/test_reference_pages.py`` fails when the code changed and a page
did not (``--check``). Write them again with ``make reference`` (this script)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from dbtester.cli import cli
from dbtester.config.reference import render_reference
from dbtester.jsonout import JSON_VERSION
from dbtester.results.schema import HISTORY, SCHEMA_VERSION
from dbtester.schemas import COMMANDS, load_schema

REFERENCE = Path(__file__).parent / "reference"
#: the width the command help is wrapped at, whatever the terminal
_WIDTH = 88
_HEADER = "<!-- written by docs/gen_reference.py from the code: run `make reference` -->\n\n"


def schema_page() -> str:
    lines = [
        "# Results schema",
        "",
        f"Every JSON file in a results directory carries `schema_version`; this"
        f" dbtester writes version {SCHEMA_VERSION}. `dbtester analyze` reads every"
        " older version (each upgrades step by step) and refuses a newer one with"
        " exit 2, naming the file and both versions.",
        "",
    ]
    for version, change in enumerate(HISTORY, start=1):
        # reStructuredText's ``code`` in the module, Markdown's `code` here.
        text = re.sub(r"``([^`]+)``", r"`\1`", change)
        lines += [f"## Version {version}", "", text, ""]
    return "\n".join(lines)


def json_page() -> str:
    lines = [
        "# JSON output",
        "",
        "`validate`, `compare` and `history` take `--json` and then print one JSON"
        " document on stdout in place of the text; the exit code is the same as"
        ' without it. Every document carries `"dbtester_json"` (now'
        f' {JSON_VERSION}) and `"command"`. The version changes only when a field'
        " is removed or changes meaning; new fields may appear without it, so a"
        " script should ignore fields it does not know. A number JSON cannot hold"
        " (a change against a mean of 0) is `null`.",
        "",
        "The schemas (JSON Schema draft 2020-12) ship inside the package, so a"
        " script can validate against the installed version:",
        "",
        "```python",
        "from dbtester.schemas import load_schema",
        "",
        'schema = load_schema("compare")',
        "```",
        "",
    ]
    for command in COMMANDS:
        schema = load_schema(command)
        lines += [
            f"## `dbtester {command} --json`",
            "",
            schema.get("description", ""),
            "",
            "```json",
            json.dumps(schema, indent=2, ensure_ascii=False),
            "```",
            "",
        ]
    return "\n".join(lines)


def _commands(
    command: click.Command, path: tuple[str, ...], parent: click.Context | None
) -> Iterator[tuple[tuple[str, ...], click.Command, click.Context]]:
    """Every command under ``command``, depth first, in the order ``--help`` lists them."""
    # the command's own settings (-h for help), as its --help runs with them
    settings = {**command.context_settings, "terminal_width": _WIDTH, "max_content_width": _WIDTH}
    context = click.Context(command, info_name=path[-1], parent=parent, **settings)
    yield path, command, context
    if isinstance(command, click.Group):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, (*path, name), context)


def cli_page() -> str:
    lines = [
        "# Commands",
        "",
        "Every command and option, as `--help` prints them. Exit codes: 0 success,"
        " 1 a run failed (or a gate found a regression), 2 bad input, 3 publishing"
        " failed (the local results are complete), 4 a bisect named no version,"
        " 130 interrupted.",
        "",
    ]
    found = list(_commands(cli, ("dbtester",), None))
    lines += ["| command | what it does |", "|---|---|"]
    for path, command, _ in found[1:]:
        anchor = "-".join(path)  # the heading's own anchor, on the site and in a repository view
        summary = command.get_short_help_str(limit=100).replace("|", "\\|")
        lines.append(f"| [`{' '.join(path)}`](#{anchor}) | {summary} |")
    lines.append("")
    for path, command, context in found:
        lines += [
            f"## {' '.join(path)}",
            "",
            "```text",
            command.get_help(context).rstrip(),
            "```",
            "",
        ]
    return "\n".join(lines)


def pages() -> dict[str, str]:
    """Each reference page's file name and text, as the code writes it now."""
    texts = {
        "test-case.md": render_reference(),
        "cli.md": cli_page(),
        "results-schema.md": schema_page(),
        "json-output.md": json_page(),
    }
    return {name: _HEADER + text.rstrip("\n") + "\n" for name, text in texts.items()}


def stale(directory: Path = REFERENCE) -> list[str]:
    """The pages in ``directory`` missing or not as the code writes them now."""
    return sorted(
        name
        for name, text in pages().items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    )


def main(directory: Path = REFERENCE) -> None:
    directory.mkdir(exist_ok=True)
    written = pages()
    for name in stale(directory):
        (directory / name).write_text(written[name])
        print(f"wrote {directory / name}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        # what a test runs, in an interpreter of its own: click caches each
        # command's help option, so another test's calls could change a page
        if behind := stale():
            sys.exit(f"docs/reference/{behind} fell behind the code: run `make reference`")
    else:
        main()
