"""The test-case reference, written from the model itself: every key, its type,
default, bounds and meaning, so the documentation cannot drift from what
``dbtester validate`` accepts. The docs site renders it at build time
(``docs/gen_reference.py``); a test checks every key has a meaning.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from dbtester.config.faults import EVENTS, Fault
from dbtester.config.model import (
    MAX_MEMBERS,
    DatabaseSpec,
    Host,
    Publish,
    TestCase,
    TlsFiles,
    Workload,
)
from dbtester.config.search import Search
from dbtester.databases import KINDS
from dbtester.workloads import TYPES

__all__ = ["SECTIONS", "missing_descriptions", "render_reference"]

#: (heading, where the keys go in a test case, model), in the order a test case reads
SECTIONS: tuple[tuple[str, str, type[BaseModel]], ...] = (
    ("Top level", "", TestCase),
    ("workload", "workload:", Workload),
    ("databases", "databases: [- ...]", DatabaseSpec),
    ("hosts", "databases: [- hosts: [- ...]]", Host),
    ("tls", "databases: [- tls: ...]", TlsFiles),
    ("faults", "faults: [- ...]", Fault),
    ("search", "search:", Search),
    ("publish", "publish:", Publish),
)


def _kind_sections() -> Iterator[tuple[str, str, type[BaseModel]]]:
    for name, kind in KINDS.items():
        yield (f"{name}: flags", f"databases: [- kind: {name}, flags:]", kind.flags_model)
        yield (f"{name}: client", f"databases: [- kind: {name}, client:]", kind.client_model)
        if kind.auth_model is not None:
            yield (f"{name}: auth", f"databases: [- kind: {name}, auth:]", kind.auth_model)


def _type_sections() -> Iterator[tuple[str, str, type[BaseModel]]]:
    for name, workload_type in TYPES.items():
        yield (f"workload type: {name}", f"workload: (type: {name})", workload_type)


def _all_sections() -> list[tuple[str, str, type[BaseModel]]]:
    sections = list(SECTIONS)
    at = [s[2] for s in sections].index(Workload) + 1
    return [*sections[:at], *_type_sections(), *sections[at:], *_kind_sections()]


def _fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's keys; a workload type's own only (the shared ones are listed once)."""
    if issubclass(model, Workload) and model is not Workload:
        return {n: f for n, f in model.model_fields.items() if n not in Workload.model_fields}
    return dict(model.model_fields)


def _type_name(annotation: Any) -> str:
    """A reader's name for a type: integer, number, list of ..., one of a | b."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(dict.fromkeys(names))  # each kind's spec is one "mapping"
    if origin is tuple:
        return f"list of {_type_name(args[0])}" if args else "list"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    simple = {int: "integer", float: "number", bool: "true/false", str: "string"}
    return simple.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _constraints(metadata: list[Any]) -> Iterator[str]:
    words = (
        (annotated_types.Ge, "ge", "≥"),
        (annotated_types.Gt, "gt", ">"),
        (annotated_types.Le, "le", "≤"),
        (annotated_types.Lt, "lt", "<"),
        (annotated_types.MinLen, "min_length", "length ≥"),
        (annotated_types.MaxLen, "max_length", "length ≤"),
    )
    for item in metadata:
        if isinstance(item, FieldInfo):  # Annotated[int, Field(ge=1)]
            yield from _constraints(list(item.metadata))
            continue
        for cls, attribute, symbol in words:
            if isinstance(item, cls):
                yield f"{symbol} {_number(getattr(item, attribute))}"
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            yield f"matches `{pattern}`"


def _number(value: Any) -> str:
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


def _bounds(field: FieldInfo) -> str:
    found = list(_constraints(list(field.metadata)))
    annotation = field.annotation
    # Bounds on a union's member (repeat: 1..100, or auto) or a list's items.
    each = "each " if typing.get_origin(annotation) is tuple else ""
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is typing.Annotated:
            found += [f"{each}{c}" for c in _constraints(list(typing.get_args(arg)[1:]))]
    return ", ".join(found)


def _default(field: FieldInfo) -> str:
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("doc_default"), str):
        return str(extra["doc_default"])
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "{}"
    if isinstance(value, tuple):
        return f"`{list(value)}`" if value else "`[]`"
    if value == "":
        return '`""`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _rows(model: type[BaseModel]) -> Iterator[str]:
    for name, field in _fields(model).items():
        meaning = (field.description or "").replace("|", "\\|")
        cells = (f"`{name}`", _type_name(field.annotation), _default(field), _bounds(field))
        yield f"| {' | '.join(cells)} | {meaning} |"


def render_reference() -> str:
    """The reference page, in Markdown."""
    lines = [
        "# Test-case reference",
        "",
        "Every key a test case may hold, written from the model `dbtester validate`"
        " checks against, so it is always current. Unknown keys are errors; bounds are"
        " inclusive unless written < or >.",
        "",
    ]
    for heading, where, model in _all_sections():
        lines += [f"## {heading}", ""]
        if where:
            lines += [f"Under `{where}`.", ""]
        if model.__doc__:
            lines += [" ".join(model.__doc__.split()), ""]
        if not _fields(model):
            lines += ["No keys of its own.", ""]
            continue
        lines += ["| key | type | default | bounds | meaning |", "|---|---|---|---|---|"]
        lines += [*_rows(model), ""]
    return "\n".join([*lines, *kinds_table(), *events_table()])


#: what a test case may ask of a kind, in the words Workload.needs and
#: DatabaseKind.cannot share, and how the docs name it
CAPABILITIES = {
    "serializable": "`consistency: serializable` reads",
    "read_modify_write": "`read_modify_write_proportion` above 0",
}


def kinds_table() -> list[str]:
    """What each kind can be asked, as each kind declares it (``members``,
    ``watches``, ``cannot``, ``tls``, ``auth_model``)."""

    def rows() -> Iterator[tuple[str, list[str]]]:
        yield "members", [str(k.max_members or MAX_MEMBERS) + " at most" for k in kinds]
        yield "`type: watch`", ["yes" if k.watches else "no" for k in kinds]
        for capability, words in CAPABILITIES.items():
            yield words, [k.cannot.get(capability, "yes") for k in kinds]
        yield "`tls`", ["yes" if k.tls else "not yet" for k in kinds]
        yield "`auth`", ["yes" if k.auth_model else "not yet" for k in kinds]

    kinds = list(KINDS.values())
    return _by_kind(
        "What each kind can run",
        "As each kind declares it; `validate` refuses a test case that asks a kind for"
        " what it cannot do, at the line that asks.",
        "",
        rows(),
    )


def events_table() -> list[str]:
    """Which maintenance event each kind runs, and what stands for the ones it
    does not, as each kind declares them (``DatabaseKind.events``)."""
    rows = (
        (
            f"`{event}`",
            [
                "yes" if event in kind.events else kind.event_notes.get(event, "no")
                for kind in KINDS.values()
            ],
        )
        for event in EVENTS
    )
    return _by_kind(
        "Maintenance events by kind",
        "The `faults:` actions that end by themselves, and which kind can run each;"
        " `validate` refuses one that a database of the test case cannot run.",
        "event",
        rows,
    )


def _by_kind(
    heading: str, intro: str, corner: str, rows: Iterator[tuple[str, list[str]]]
) -> list[str]:
    """A section with a table of one column per kind, a row per (what, cells)."""
    lines = [
        f"## {heading}",
        "",
        intro,
        "",
        f"| {corner} | " + " | ".join(KINDS) + " |",
        "|---|" + "---|" * len(KINDS),
    ]
    lines += [f"| {what} | " + " | ".join(cells) + " |" for what, cells in rows]
    return [*lines, ""]


def missing_descriptions() -> list[str]:
    """``section.key`` for every key without a meaning (a test keeps this empty)."""
    return [
        f"{heading}.{name}"
        for heading, _, model in _all_sections()
        for name, field in _fields(model).items()
        if not field.description
    ]
