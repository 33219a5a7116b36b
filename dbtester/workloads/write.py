"""``type: write``: distinct keys, in order or shuffled, or one key overwritten."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from dbtester.workloads.writing import KeyWriting

__all__ = ["WriteWorkload"]


class WriteWorkload(KeyWriting):
    """Writes `requests` distinct keys (or one key, with `same_key`)."""

    IGNORED: ClassVar[tuple[str, ...]] = ("consistency",)
    SUMMARY: ClassVar[str] = "distinct keys (or one, with same_key)"

    type: Literal["write"] = Field("write", description="write: " + SUMMARY)
    same_key: bool = Field(False, description="Overwrite one key instead of distinct keys")

    @property
    def one_key(self) -> bool:
        return self.same_key

    def describe(self, requests: str) -> str:
        if self.same_key:
            keys = "one key, overwritten"
        else:
            keys = "sequential keys" if self.sequential_keys else "random keys"
        return f"write {requests} requests ({keys})"
