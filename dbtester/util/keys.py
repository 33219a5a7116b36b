"""Key names and the order a workload writes them in.

Key ``i`` is ``b"k"`` followed by ``i`` zero-padded to ``key_size`` bytes, so
keys are distinct, fixed-size and share a prefix that verification can count.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["CHECKED_PREFIX", "MAX_CHECKED", "PREFIX", "KeySpace", "checked_keys"]

PREFIX = b"k"
#: the checked clients' keys (``check:``) are this and a number, apart from
#: the load's; the load engine names them the same way
CHECKED_PREFIX = "c"
#: checked clients and keys at most
MAX_CHECKED = 64


def checked_keys() -> list[str]:
    """Every key a checked client may write, so a count can leave them out."""
    return [f"{CHECKED_PREFIX}{n}" for n in range(MAX_CHECKED)]


class KeySpace:
    """Which key request ``i`` uses: sequential, a random permutation, or one key."""

    def __init__(
        self,
        requests: int,
        key_size: int,
        *,
        sequential: bool = True,
        same_key: bool = False,
        seed: int = 1,
    ) -> None:
        self.key_size = key_size
        self.same_key = same_key
        self.width = max(key_size - len(PREFIX), 0)
        self.order: npt.NDArray[np.int64] | None = None
        if not same_key and not sequential:
            self.order = np.random.default_rng(seed).permutation(requests).astype(np.int64)

    def key(self, i: int) -> bytes:
        if self.same_key:
            i = 0
        elif self.order is not None:
            i = int(self.order[i])
        if self.width == 0:
            return PREFIX  # key_size 1: the one key there is
        digits = str(i)
        if len(digits) > self.width:  # config validation prevents this
            raise ValueError(f"key {i} does not fit in {self.key_size} bytes")
        return PREFIX + digits.zfill(self.width).encode()

    @staticmethod
    def capacity(key_size: int) -> int:
        """How many distinct keys fit in ``key_size`` bytes."""
        width = key_size - len(PREFIX)
        return 10**width if width > 0 else 1
