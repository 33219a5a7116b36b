"""Key names and the order a workload writes them in.

Key ``i`` is ``b"k"`` followed by ``i`` zero-padded to ``key_size`` bytes, so
keys are distinct, fixed-size and share a prefix that verification can count.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "CHECKED_PREFIX",
    "MAX_CHECKED",
    "PREFILL_PREFIX",
    "PREFIX",
    "KeySpace",
    "checked_keys",
    "prefill_batches",
    "prefill_key",
]

PREFIX = b"k"
#: the checked clients' keys (``check:``) are this and a number, apart from
#: the load's; the load engine names them the same way
CHECKED_PREFIX = "c"
#: checked clients and keys at most
MAX_CHECKED = 64


#: the pre-filled keys (a workload's ``prefill_keys``) are this and a number:
#: outside the load's keys, so verification does not count them
PREFILL_PREFIX = "p"
#: at most this many bytes of values in one batch of a pre-fill (each kind's
#: request size limits are above it: etcd 1.5 MiB, Consul 512 KiB with its
#: base64, ZooKeeper 1 MiB)
PREFILL_BATCH_BYTES = 256 << 10


def prefill_key(number: int) -> str:
    """Pre-filled key ``number``: 16 bytes, ``p`` and the number zero-padded."""
    return f"{PREFILL_PREFIX}{number:015d}"


def prefill_batches(count: int, value_size: int, most: int) -> list[range]:
    """The key numbers 0 .. ``count`` - 1 in batches of at most ``most`` keys
    and PREFILL_BATCH_BYTES of values."""
    size = max(1, min(most, PREFILL_BATCH_BYTES // max(value_size + 16, 1)))
    return [range(start, min(start + size, count)) for start in range(0, count, size)]


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
