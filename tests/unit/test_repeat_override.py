"""``--repeat N`` over a test case with ``repeat: auto``: the auto-only keys
are set back to their defaults (and the run says so), so that the
config.yaml a run writes validates when it is read again."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from dbtester.config import load_test_case
from dbtester.control.run import _with_repeat
from dbtester.util.progress import Reporter
from tests.conftest import ROOT

QUICKSTART = ROOT / "configs" / "quickstart.yaml"


def test_a_number_over_auto_drops_the_auto_only_keys(tmp_path: Path) -> None:
    case = load_test_case(QUICKSTART).case
    assert case.repeat == "auto" and case.time_budget == 120.0
    said = io.StringIO()
    three = _with_repeat(case, 3, Reporter(said))
    assert three.repeat == 3 and three.time_budget is None
    assert said.getvalue() == (
        "--repeat 3 replaces the test case's repeat: auto; its time_budget not used\n"
    )
    written = tmp_path / "config.yaml"
    written.write_text(yaml.safe_dump(three.to_raw()))
    again = load_test_case(written).case  # raised "time_budget is for repeat: auto only"
    assert again.repeat == 3 and "time_budget" not in written.read_text()


def test_auto_over_auto_and_numbers_over_numbers_say_nothing() -> None:
    case = load_test_case(QUICKSTART).case
    said = io.StringIO()
    assert _with_repeat(case, "auto", Reporter(said)).time_budget == 120.0
    five = _with_repeat(_with_repeat(case, 2, Reporter(io.StringIO())), 5, Reporter(said))
    assert five.repeat == 5 and said.getvalue() == ""
