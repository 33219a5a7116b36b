"""Does HOST-SPEED explain the spread between trials? Tried on a real run.

Given a results directory of two databases run with trials (an A/A run — the
same database listed twice — is the honest test), this prints, for the
throughput difference of the second database against the first:

- the 95% interval's half-width of the paired difference of log throughput
  (trial k of each), and the same after adjusting for the paired difference
  of log HOST-SPEED (a regression's intercept): what using the host's speed
  as a covariate would gain;
- the same unpaired: the two-group difference with and without log
  HOST-SPEED as a covariate (ANCOVA).

A narrower interval at the same false-verdict rate is the only reason to
adopt the covariate; a wider or equal one is a reason not to.

    python benchmarks/host_speed_covariate.py RESULTS_DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy import stats

Array = npt.NDArray[np.float64]


def _column(database: dict[str, object], row: str) -> Array:
    trials = database["trial_figures"]
    assert isinstance(trials, list)
    return np.array([float(t[row]) for t in trials])


def _half_width(design: Array, y: Array, coefficient: int) -> float:
    """The 95% half-width of one least-squares coefficient, in % (log scale)."""
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ beta
    dof = len(y) - design.shape[1]
    covariance = (residual @ residual / dof) * np.linalg.inv(design.T @ design)
    return float(100 * stats.t.ppf(0.975, dof) * np.sqrt(covariance[coefficient, coefficient]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    summary = json.loads((args.results / "result.json").read_text())
    first, second = summary["databases"][:2]
    a, b = (np.log(_column(d, "AVG-THROUGHPUT")) for d in (first, second))
    sa, sb = (np.log(_column(d, "HOST-SPEED")) for d in (first, second))
    n = min(len(a), len(b))
    if n < 4:
        sys.exit("need at least 4 trials of each database")
    a, b, sa, sb = a[:n], b[:n], sa[:n], sb[:n]
    ones = np.ones(n)
    y, x = b - a, sb - sa
    r = float(np.corrcoef(x, y)[0, 1])
    print(f"{second['id']} against {first['id']}, {n} trials each")
    print(f"correlation of the paired differences, log throughput ~ log HOST-SPEED: {r:.2f}")
    paired = _half_width(ones[:, None], y, 0)
    adjusted = _half_width(np.c_[ones, x], y, 0)  # the difference at equal speeds
    print(f"paired:   half-width {paired:.2f}%, with HOST-SPEED as covariate {adjusted:.2f}%")
    group = np.r_[np.zeros(n), np.ones(n)]
    both = np.r_[a, b]
    speed = np.r_[sa, sb]
    plain = _half_width(np.c_[np.ones(2 * n), group], both, 1)
    ancova = _half_width(np.c_[np.ones(2 * n), group, speed - speed.mean()], both, 1)
    print(f"unpaired: half-width {plain:.2f}%, with HOST-SPEED as covariate {ancova:.2f}%")


if __name__ == "__main__":
    main()
