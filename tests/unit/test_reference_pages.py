"""The committed reference pages (docs/reference/) are what the code writes
now: a changed key, command, schema version or --json schema without its
page fails here, with the command that writes them again."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs/gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_reference_page_is_current() -> None:
    assert sorted(_generator().pages()) == [
        "cli.md",
        "json-output.md",
        "results-schema.md",
        "test-case.md",
    ]
    # in an interpreter of its own: click caches each command's help option,
    # so a page written here could differ by what other tests ran before
    checked = subprocess.run(
        [sys.executable, str(ROOT / "docs/gen_reference.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


def test_the_command_page_has_every_command_and_its_options() -> None:
    text = (ROOT / "docs/reference/cli.md").read_text()
    for heading in ("## dbtester run", "## dbtester agents up", "## dbtester bisect"):
        assert f"\n{heading}\n" in text, heading
    # the option list as --help prints it, links from the summary table
    assert "--out" in text and "(#dbtester-agents-up)" in text
    assert "::: mkdocs-click" not in text  # readable without a plugin


def test_a_page_edited_or_missing_is_named_and_written_again(tmp_path: Path) -> None:
    generator = _generator()
    generator.main(tmp_path)
    assert generator.stale(tmp_path) == []
    page = tmp_path / "test-case.md"
    page.write_text(page.read_text().replace("# ", "# Edited ", 1))
    (tmp_path / "cli.md").unlink()
    assert generator.stale(tmp_path) == ["cli.md", "test-case.md"]
    generator.main(tmp_path)
    assert generator.stale(tmp_path) == []
