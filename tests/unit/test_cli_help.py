"""Every command explains itself: its ``--help`` shows examples and its exit
codes, and every example is a command line the tree accepts (the command
exists, and so does each option it uses) — an example cannot go stale
silently when an option is renamed."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from dbtester.cli import cli


def _leaves(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every command that is not a group, through the whole tree."""
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _leaves(command, (*path, name))
        else:
            yield (*path, name)


LEAVES = list(_leaves(cli))


def _help(path: tuple[str, ...], root: click.Group = cli) -> str:
    result = CliRunner().invoke(root, [*path, "--help"], prog_name="dbtester")
    assert result.exit_code == 0, result.output
    return result.output


def _examples(help_text: str) -> list[str]:
    return [line.strip() for line in help_text.splitlines() if line.strip().startswith("dbtester ")]


def _option_names(command: click.Command) -> set[str]:
    ctx = click.Context(command, info_name=command.name)
    return {name for param in command.get_params(ctx) for name in param.opts + param.secondary_opts}


def example_problems(example: str, root: click.Group = cli) -> list[str]:
    """What is wrong with ``example`` ("dbtester ..."): an unknown command or
    an option its command does not have; nothing when it parses."""
    words = shlex.split(example)[1:]
    command: click.Command = root
    while isinstance(command, click.Group):
        if not words or words[0] not in command.commands:
            return [f"{example!r}: no command {' '.join(words[:1]) or '(none)'!r}"]
        command = command.commands[words.pop(0)]
    known = _option_names(command)
    return [
        f"{example!r}: {command.name} has no option {word.split('=')[0]}"
        for word in words
        if word.startswith("-") and word.split("=")[0] not in known
    ]


def test_the_walk_finds_every_command() -> None:
    assert {" ".join(path) for path in LEAVES} >= {
        "validate",
        "convert",
        "install",
        "agent serve",
        "run",
        "analyze",
        "compare",
        "history",
        "publish",
        "agents up",
        "agents down",
        "agents status",
        "init",
    }


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_help_shows_examples_and_exit_codes(path: tuple[str, ...]) -> None:
    text = _help(path)
    assert "Examples:" in text and "Exit codes:" in text, text
    examples = _examples(text)
    assert examples, f"no `dbtester ...` example in the help of {' '.join(path)}"
    # the examples are of this command (a later `dbtester` may lead up to it)
    assert any(shlex.split(e)[1 : 1 + len(path)] == list(path) for e in examples), examples
    problems = [p for example in examples for p in example_problems(example)]
    assert not problems, problems
    # each exit code on its own line: click kept the block as written
    block = text.split("Exit codes:", 1)[1]
    codes = [line.split()[0] for line in block.splitlines() if line.strip()]
    assert codes[0] == "0" and all(code.isdigit() for code in codes), block


def test_the_top_level_help_lists_every_exit_code() -> None:
    block = _help(()).split("Exit codes:", 1)[1]
    codes = [line.split()[0] for line in block.splitlines() if line.strip()]
    assert codes == ["0", "1", "2", "3", "130"], block


def test_an_example_with_an_unknown_option_is_caught() -> None:
    """The check itself: an example naming an option or a command that does not
    exist is reported (as a renamed option would be)."""
    assert example_problems("dbtester run configs/quickstart.yaml --repeat 3") == []
    assert example_problems("dbtester run configs/quickstart.yaml --repeats 3") == [
        "'dbtester run configs/quickstart.yaml --repeats 3': run has no option --repeats"
    ]
    assert example_problems("dbtester agents up cluster.yaml --wheels=x.whl")
    assert example_problems("dbtester agents sideways cluster.yaml")
    assert example_problems("dbtester agents")


def test_a_command_whose_example_went_stale_fails_the_walk() -> None:
    """A whole tree with one stale example: the test above would fail on it."""

    @click.group()
    def root() -> None:
        pass

    @root.command(epilog="\b\nExamples:\n  dbtester go --fast\n\n\b\nExit codes:\n  0  ok")
    @click.option("--slow", is_flag=True)
    def go(slow: bool) -> None:
        pass

    [example] = _examples(_help(("go",), root))
    assert example_problems(example, root) == ["'dbtester go --fast': go has no option --fast"]
