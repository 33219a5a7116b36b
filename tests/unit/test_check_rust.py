"""make's `rust` step: a missing or too old cargo is named, with its version
and the two ways on (rustup, or a wheel built elsewhere)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check-rust.sh"


def _check(tmp_path: Path, cargo_says: str | None) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if cargo_says is not None:
        cargo = bin_dir / "cargo"
        cargo.write_text(f"#!/bin/sh\necho '{cargo_says}'\n")
        cargo.chmod(0o755)
    # the shell's own tools, and no other cargo
    path = f"{bin_dir}:/usr/bin:/bin"
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), "1.88"],
        env={"PATH": path},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.skipif(Path("/usr/bin/cargo").exists(), reason="Debian's cargo is on /usr/bin")
def test_no_cargo_says_what_to_do(tmp_path: Path) -> None:
    done = _check(tmp_path, None)
    assert done.returncode == 1
    assert "no cargo on PATH" in done.stderr and "pipx install dbtester-*.whl" in done.stderr


def test_an_old_cargo_is_named_with_its_version(tmp_path: Path) -> None:
    done = _check(tmp_path, "cargo 1.63.0 (fd9c4297c 2022-07-01)")
    assert done.returncode == 1
    assert "needs Rust 1.88 or newer" in done.stderr and "is 1.63.0" in done.stderr
    assert "rustup" in done.stderr and "make wheel" in done.stderr


@pytest.mark.parametrize("version", ["1.88.0", "1.95.0", "1.100.1-nightly"])
def test_a_new_enough_cargo_passes(tmp_path: Path, version: str) -> None:
    done = _check(tmp_path, f"cargo {version} (abc 2026-01-01)")
    assert done.returncode == 0, done.stderr
