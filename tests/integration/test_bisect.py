"""``dbtester bisect`` end to end over stand-in versions: six "releases"
9.0.0 .. 9.0.5, each the real etcd behind a wrapper, from 9.0.3 on run with
Go's garbage collector off (GOGC=off), a planted memory regression of about
+70% on this load (38 against 65 MB after 2,000 puts, measured here). Real
agents, real members, real trials; the versions are installed by hand in a
home of the test's own."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dbtester.errors import EXIT_NOT_LOCATED, EXIT_OK
from tests.conftest import CliResult
from tests.support.cases import database, make_case
from tests.support.cluster import VERSIONS

pytestmark = pytest.mark.integration

STANDINS = [f"9.0.{n}" for n in range(6)]
FIRST_BAD = "9.0.3"
METRIC = "SERVER-MAX-MEMORY-USAGE"


def _install_standins(home: Path, real_etcd: Path) -> None:
    for version in STANDINS:
        root = home / "etcd" / version
        root.mkdir(parents=True)
        gc = "GOGC=off " if version >= FIRST_BAD else ""
        wrapper = root / "etcd"
        # exec all the way: the member's PID is etcd's, as the agent samples it
        wrapper.write_text(f'#!/bin/sh\nexec env {gc}{real_etcd} "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        manifest = {
            "manifest_version": 1,
            "kind": "etcd",
            "version": version,
            "source": "a stand-in of the bisect test",
            "entry": {"etcd": str(wrapper)},
            "installed_at": "2026-11-26T00:00:00+00:00",
        }
        (root / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def standin_home(
    tmp_path: Path, installed_home: Callable[[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> Path:
    real = Path(installed_home("etcd", VERSIONS["etcd"])) / "etcd" / VERSIONS["etcd"] / "etcd"
    home = tmp_path / "home"
    _install_standins(home, real)
    monkeypatch.setenv("DBTESTER_HOME", str(home))
    return home


def _case(path: Path) -> Path:
    case = make_case(
        title="bisect",
        workload={"requests": 2000, "key_size": 16, "value_size": 1024}
        | {"clients": 8, "connections": 2},
        databases=[database("etcd", version="9.0.0")],
        # Identical binaries' peak memory is within a few %; the planted +70%
        # is decided in three or four trials (max_trials 4: t multiplier 7.5
        # after three pairs, 3.5 after four).
        repeat="auto",
        max_trials=4,
        equivalence=25,
    )
    case["databases"].append(database("other", version="9.0.5"))
    path.write_text(yaml.safe_dump(case))
    return path


def _bisect(
    run_cli: Callable[..., CliResult], case: Path, out: Path, bad: str = "9.0.5"
) -> CliResult:
    return run_cli(
        "bisect",
        str(case),
        "--good",
        "9.0.0",
        "--bad",
        bad,
        "--metric",
        METRIC,
        "--versions",
        ",".join(STANDINS),
        "--out",
        str(out),
    )


def test_bisect_names_the_planted_version_and_resumes(
    standin_home: Path, tmp_path: Path, run_cli
) -> None:
    case, out = _case(tmp_path / "case.yaml"), tmp_path / "bisect"
    result = _bisect(run_cli, case, out)
    assert result.code == EXIT_OK, result.err[-3000:]
    assert f"first version with a regression: etcd {FIRST_BAD}" in result.out
    assert "the last without it: 9.0.2" in result.out
    record = json.loads((out / "bisect.json").read_text())
    tried = [s["version"] for s in record["steps"]]
    # the ends, then the halves: 9.0.2 (unchanged), 9.0.3 (changed)
    assert tried == ["9.0.5", "9.0.2", FIRST_BAD]
    assert [s["changed"] for s in record["steps"]] == ["changed", "unchanged", "changed"]
    first = record["steps"][-1]
    assert first["verdict"] == "more" and first["low_pct"] > 0 and first["p_value"] < 0.05
    # Every step is a results directory of its own.
    for step in record["steps"]:
        assert (out / step["folder"] / "result.json").exists()
    table = result.out.splitlines()
    assert [line.split()[0] for line in table[1:4]] == ["9.0.2", FIRST_BAD, "9.0.5"]

    # Interrupted during the last step: its record not yet written, its folder
    # half there. The same command reuses the two finished steps, keeps the
    # half folder aside and runs only the last step again.
    last = out / record["steps"][-1]["folder"]
    (last / "summary.txt").unlink(missing_ok=True)
    record["steps"] = record["steps"][:-1]
    (out / "bisect.json").write_text(json.dumps(record))
    before = {p: p.stat().st_mtime_ns for p in out.glob("*/result.json") if p.parent != last}
    again = _bisect(run_cli, case, out)
    assert again.code == EXIT_OK, again.err[-3000:]
    assert "2 finished step(s)" in again.err
    assert "an unfinished step was kept aside" in again.err
    assert f"first version with a regression: etcd {FIRST_BAD}" in again.out
    assert "== etcd-9.0.2" not in again.err and "== etcd-9.0.5" not in again.err
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert len(list(out.glob("*.interrupted-*"))) == 1

    # Between 9.0.0 and 9.0.2 nothing was planted, and the ends' step is
    # already in the folder: this answers from it without running it again.
    # Its verdict is a significance test's: about one time in 40 chance
    # makes 9.0.2 significantly lower (a change the first question, which
    # looked for "more", counted as none), and then this question's change
    # reproduces and is located between them.
    ends = next(s for s in record["steps"] if s["version"] == "9.0.2")
    none = _bisect(run_cli, case, out, bad="9.0.2")
    assert "== etcd-9.0.2" not in none.err, none.err[-3000:]
    if ends["verdict"] in ("less", "more"):
        assert none.code == EXIT_OK, none.err[-3000:]
        assert "first version with " in none.out and "etcd 9.0." in none.out, none.out
    else:
        assert none.code == EXIT_NOT_LOCATED, none.err[-3000:]
        assert "the change did not reproduce" in none.err
        assert "means: 9.0.0" in none.err and "== etcd" not in none.err
    assert os.path.exists(out / "bisect.json")
