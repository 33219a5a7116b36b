"""A text row across trials: one value when all share it, how many trials
give each verdict (CORRECTNESS), and each trial's value otherwise."""

from __future__ import annotations

import pytest

from dbtester.analyze.figures import Figures
from dbtester.analyze.trials import combine


def _row(values: list[str | None]) -> object:
    trials = [Figures(values={"ROW": v}) for v in values]
    combined, _ = combine(trials, list(range(1, len(values) + 1)))
    return combined.values["ROW"]


@pytest.mark.parametrize(
    ("values", "said"),
    [
        (["linearizable (10 operations)"] * 2, "linearizable (10 operations)"),
        (
            ["linearizable (2,512 operations)", "linearizable (2,455 operations)"],
            "linearizable in all 2 trials",
        ),
        (
            [
                "linearizable (5 operations)",
                "VIOLATED (1 of 8 keys)",
                "linearizable (6 operations)",
            ],
            "linearizable in 2 of 3 trials; VIOLATED in 1 of 3 trials",
        ),
        (["3,000 / 3,000 OK", "2,999 / 3,000 FAILED"], "OK in 1 of 2 trials"),
        # a trial without the row, or values that are no verdict: each trial's
        (["linearizable (5 operations)", None], "linearizable (5 operations); -"),
        (["12 (3%)", "13 (4%)"], "12 (3%); 13 (4%)"),
    ],
)
def test_text_rows_across_trials(values: list[str | None], said: str) -> None:
    assert _row(values) == said
