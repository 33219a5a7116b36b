"""The wheel (what `make wheel` builds, and `agents up` ships) installs into
a fresh virtual environment on a PATH with no Rust toolchain, offline from
the cached dependency wheels, and runs: the engine imports, `validate`
reads a test case, and a small run against a real etcd verifies its keys."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from dbtester.remote.wheels import Wheelhouse, build_wheelhouse
from tests.support.cases import make_case, write_case
from tests.support.home import home_at

ETCD = "3.5.17"
#: what the run needs from the system beside Python: the parent-death wrapper
_TOOLS = ("setpriv",)


def _manylinux_glibc(name: str) -> tuple[int, int]:
    found = re.search(r"manylinux_(\d+)_(\d+)_", name)
    assert found, name
    return int(found[1]), int(found[2])


def _host_glibc() -> tuple[int, int]:
    major, minor = (os.confstr("CS_GNU_LIBC_VERSION") or "glibc 0.0").split()[1].split(".")[:2]
    return int(major), int(minor)


def _wheelhouse(home: Path) -> Wheelhouse:
    with home_at(home):
        return build_wheelhouse(say=lambda _line: None)


def _path_without_rust(venv: Path, tools: Path) -> str:
    tools.mkdir()
    for name in _TOOLS:
        if found := shutil.which(name):
            (tools / name).symlink_to(found)
    path = f"{venv / 'bin'}{os.pathsep}{tools}"
    assert shutil.which("cargo", path=path) is None and shutil.which("rustc", path=path) is None
    return path


def test_the_wheel_installs_and_runs_without_rust(tmp_path: Path, installed_home: Any) -> None:
    home = Path(installed_home("etcd", ETCD))
    house = _wheelhouse(home)
    wheel = house.dbtester_wheel
    # abi3: one wheel for every CPython from 3.11; manylinux: for any glibc
    # Linux at least as new as the symbols the engine uses; the engine inside
    assert "-abi3-manylinux_" in wheel.name, wheel.name
    assert _manylinux_glibc(wheel.name) <= _host_glibc(), wheel.name
    assert any(n.startswith("dbtester/_engine") for n in zipfile.ZipFile(wheel).namelist())
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {
        "PATH": _path_without_rust(venv, tmp_path / "tools"),
        "HOME": str(tmp_path),
        "DBTESTER_HOME": str(home),
    }
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    installed = subprocess.run(
        [*pip, "install", "-q", "--no-index", "--find-links", str(house.directory), str(wheel)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import dbtester._engine as e; print(e.__file__)"],
        env=env,
        cwd=tmp_path,  # not the source tree: the installed package is imported
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(venv)), where.stdout
    case = make_case(
        title="from the wheel",
        workload={"requests": 500},
        databases=[{"id": "etcd", "kind": "etcd", "version": ETCD, "members": 1}],
    )
    config = write_case(tmp_path / "case.yaml", case)
    dbtester = str(venv / "bin" / "dbtester")
    checked = subprocess.run(
        [dbtester, "validate", str(config)], env=env, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
    out = tmp_path / "out"
    ran = subprocess.run(
        [dbtester, "run", str(config), "--out", str(out)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    (db,) = json.loads((out / "result.json").read_text())["databases"]
    assert db["figures"]["KEYS-VERIFIED"] == "500 / 500 OK"
