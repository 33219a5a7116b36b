"""The README and the docs pages make claims the code can check: every
``dbtester ...`` command line names commands and options that exist, every
``configs/`` file named exists and validates, and every measured figure
carries a marker naming the command that produced it
(``<!-- measured: COMMAND; YYYY-MM-DD -->``, the date or a commit)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from dbtester.cli import cli
from dbtester.config import load_test_case

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`(dbtester [^`]+)`")
CONFIG = re.compile(r"\bconfigs/[A-Za-z0-9_.-]+\.yaml\b")
MARKER = re.compile(r"<!-- measured: (?P<command>[^;]+?); (?P<when>[^ ]+) -->")
WHEN = re.compile(r"^(\d{4}-\d{2}-\d{2}|[0-9a-f]{7,40})$")
#: a figure: a number with a unit of time, size, rate or a ratio
FIGURE = re.compile(r"\d[\d,.]*\s?(?:ms|µs|s|MB|MiB|GB|KB|req/s|req/sec|writes/s|%|x)(?![A-Za-z])")
#: words that say a figure was measured (a bound or a default is not)
MEASURED = re.compile(r"\b(?:[Mm]easured|took|peaked?|median of)\b")


@dataclass(frozen=True)
class Claim:
    page: str
    text: str


def command_lines(text: str) -> list[str]:
    """Every ``dbtester ...`` invocation in code blocks and inline code."""
    found: list[str] = []
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)  # shell line continuations
        for raw in joined.splitlines():
            line = re.sub(r"^\s*(?:\$\s+)?(?:\.venv/bin/)?", "", raw)
            if line.startswith("dbtester "):
                found.append(line)
    found += INLINE.findall(text)
    return found


def _tokens(line: str) -> list[str]:
    line = line.split("#", 1)[0]
    line = re.sub(r"[\[\]|]", " ", line)  # [--opt X] and a|b placeholders
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def command_problem(line: str) -> str | None:
    """Why ``line`` names no real command or option; None if it does."""
    tokens = _tokens(line)[1:]
    command: click.Command = cli
    path = ["dbtester"]
    while isinstance(command, click.Group) and tokens and not tokens[0].startswith("-"):
        name = tokens[0]
        words = name.split("/")  # "agents up/down/status" names three
        subcommands = [command.commands.get(w) for w in words]
        if any(s is None for s in subcommands):
            if command is cli or not command.commands:
                return f"{' '.join(path)}: no command {name!r}"
            break
        command = subcommands[0]  # type: ignore[assignment]
        path.append(name)
        tokens = tokens[1:]
    known = {o for p in command.params for o in getattr(p, "opts", [])} | {"--help", "-h"}
    for token in tokens:
        option = token.split("=", 1)[0]
        if re.fullmatch(r"--?[A-Za-z][A-Za-z0-9-]*", option) and option not in known:
            return f"{' '.join(path)}: no option {option}"
    return None


def config_problem(name: str) -> str | None:
    path = ROOT / name
    if not path.is_file():
        return f"{name} does not exist"
    try:
        load_test_case(path)
    except Exception as exc:  # any failure to load is the finding
        return f"{name} does not validate: {exc}"
    return None


def blocks(text: str) -> list[str]:
    """Paragraphs, tables and code blocks: text between blank lines, with
    fenced code kept whole."""
    out: list[str] = []
    current: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            if current:
                out.append("\n".join(current))
            current = []
            continue
        current.append(line)
    if current:
        out.append("\n".join(current))
    return out


def unmarked_figures(text: str) -> list[str]:
    """Blocks that state a measured figure with no marker in or just before them."""
    found: list[str] = []
    previous = ""
    for block in blocks(text):
        just_before = previous.splitlines()[-1] if previous else ""
        marked = MARKER.search(block) or MARKER.search(just_before)
        if not marked and MEASURED.search(block) and FIGURE.search(block):
            found.append(block.splitlines()[0][:100])
        previous = block
    return found


def marker_problems(text: str) -> list[str]:
    problems: list[str] = []
    for match in MARKER.finditer(text):
        command, when = match["command"].strip(), match["when"]
        if not WHEN.match(when):
            problems.append(f"{command}: {when!r} is neither a date nor a commit")
        for script in re.findall(r"\b(?:benchmarks|scripts|tests)/[\w/.-]+\.py", command):
            if not (ROOT / script).is_file():
                problems.append(f"{command}: {script} does not exist")
        if command.startswith("dbtester ") and (problem := command_problem(command)):
            problems.append(problem)
        target = re.match(r"make (\S+)", command)
        if target and not re.search(rf"^{target[1]}:", (ROOT / "Makefile").read_text(), re.M):
            problems.append(f"{command}: no make target {target[1]}")
    return problems


def _claims(find: object) -> list[Claim]:
    assert callable(find)
    return [
        Claim(str(page.relative_to(ROOT)), item)
        for page in PAGES
        for item in find(page.read_text(encoding="utf-8"))
    ]


def test_the_pages_are_found() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "index.md", "test-cases.md", "faults.md"} <= names


def test_every_command_line_exists_in_the_cli() -> None:
    claims = _claims(command_lines)
    assert len(claims) > 30, "the pages show dbtester's commands"
    problems = [f"{c.page}: {p}" for c in claims if (p := command_problem(c.text))]
    assert problems == []


def test_every_config_named_exists_and_validates() -> None:
    named = sorted({(c.page, c.text) for c in _claims(CONFIG.findall)})
    assert named, "the pages name test cases"
    problems = [f"{page}: {p}" for page, name in named if (p := config_problem(name))]
    assert problems == []


def test_every_measured_figure_is_marked() -> None:
    # The reference pages are written from the code (docs/gen_reference.py):
    # "the measured load" in a key's description is no figure measured.
    claims = [c for c in _claims(unmarked_figures) if not c.page.startswith("docs/reference/")]
    problems = [f"{c.page}: {c.text}" for c in claims]
    assert problems == []


def test_every_marker_names_a_real_command_and_when() -> None:
    problems = [f"{c.page}: {c.text}" for c in _claims(marker_problems)]
    assert problems == []
    assert _claims(MARKER.findall), "the pages carry measured figures"


@pytest.mark.parametrize(
    ("line", "wrong"),
    [
        ("dbtester run configs/quickstart.yaml --repat 3", "--repat"),
        ("dbtester compare A B --metrc X", "--metrc"),
        ("dbtester agents up my.yaml --no-such-flag", "--no-such-flag"),
        ("dbtester frobnicate", "frobnicate"),
    ],
)
def test_a_planted_wrong_option_or_command_is_caught(line: str, wrong: str) -> None:
    problem = command_problem(line)
    assert problem is not None and wrong in problem


def test_real_lines_pass() -> None:
    for line in (
        "dbtester run configs/quickstart.yaml --repeat 3 --out /tmp/x",
        "dbtester history SOURCE [--database ID] [--since DATE] [--out DIR]",
        "dbtester agents up/down/status CONFIG -i KEY",
        "dbtester install --list",
    ):
        assert command_problem(line) is None, line


def test_a_missing_or_invalid_config_is_caught(tmp_path: Path) -> None:
    assert "does not exist" in (config_problem("configs/no-such-case.yaml") or "")
    assert config_problem("configs/quickstart.yaml") is None


def test_an_unmarked_figure_is_caught() -> None:
    text = "Intro.\n\nThe demo took 27 s on this machine.\n\nMore."
    assert unmarked_figures(text) == ["The demo took 27 s on this machine."]
    marked = "<!-- measured: make demo; 2026-11-24 -->\nThe demo took 27 s here."
    assert unmarked_figures(marked) == []
    before = "<!-- measured: make demo; 2026-11-24 -->\n\nThe demo took 27 s here."
    assert unmarked_figures(before) == []


def test_a_marker_with_a_missing_script_is_caught() -> None:
    text = "<!-- measured: python benchmarks/nope.py; 2026-11-24 -->"
    assert any("does not exist" in p for p in marker_problems(text))
    assert marker_problems("<!-- measured: make demo; yesterday -->")
