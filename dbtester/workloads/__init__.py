"""Workload types: what the requests do, one module per type.

Each type is a :class:`~dbtester.workloads.base.Workload` subclass tagged by
its ``type``; :data:`AnyWorkload` is their union, discriminated on that tag,
as the test case's database entries are on ``kind``. Nothing outside a type's
module compares the tag (``tests/unit/test_workload_types.py`` reads the
code to make sure): code asks the workload instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Field, TypeAdapter

from dbtester.workloads.base import Workload
from dbtester.workloads.check import Check
from dbtester.workloads.kubernetes import KubernetesWorkload
from dbtester.workloads.lock import LockWorkload
from dbtester.workloads.mixed import MIN_MIXED_VALUE_SIZE, MixedWorkload
from dbtester.workloads.read import ReadWorkload
from dbtester.workloads.watch import WatchWorkload
from dbtester.workloads.write import WriteWorkload

__all__ = [
    "MIN_MIXED_VALUE_SIZE",
    "TYPES",
    "AnyWorkload",
    "Check",
    "Workload",
    "owners",
    "workload_of",
]

#: every workload type by its ``type`` tag, in the order the docs list them
TYPES: dict[str, type[Workload]] = {
    cls.type_name(): cls
    for cls in (
        WriteWorkload,
        ReadWorkload,
        MixedWorkload,
        WatchWorkload,
        KubernetesWorkload,
        LockWorkload,
    )
}

if TYPE_CHECKING:
    AnyWorkload = Workload
else:  # the tagged union of the types, discriminated by ``type``
    AnyWorkload = Annotated[Union[tuple(TYPES.values())], Field(discriminator="type")]  # noqa: UP007

_ADAPTER: TypeAdapter[Workload] = TypeAdapter(AnyWorkload)


def workload_of(**keys: Any) -> Workload:
    """The workload of ``keys`` (``type`` chooses its class), validated as
    the test case's are, but from Python values (lists become tuples)."""
    return _ADAPTER.validate_python(keys, strict=False)


def owners(key: str) -> list[str]:
    """The types that have ``key`` (for "is for type: mixed only")."""
    return [name for name, cls in TYPES.items() if key in cls.model_fields]
