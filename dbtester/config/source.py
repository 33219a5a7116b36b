"""Load YAML while remembering where every key and value stands in the file.

We compose PyYAML's event stream into nodes ourselves, without recursion, and
refuse what a test case never needs before anything is built: anchors and
aliases (a self-referencing alias loops, nested ones expand exponentially —
"billion laughs"), tags beyond YAML's plain types, nesting deeper than
:data:`MAX_DEPTH`, more than :data:`MAX_NODES` values and files larger than
:data:`MAX_BYTES`. So no input can recurse or allocate much. From the nodes we
build plain Python data and keep a map from each path (a tuple of keys and
list indexes) to its line/column, so that a validation error deep in the
model can still name ``file:line:column``. Duplicate keys, which PyYAML
silently resolves to the last one, are reported instead.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dbtester.errors import ConfigError, Problem

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "KeyPath",
    "Position",
    "SourceDoc",
    "load_yaml_file",
    "load_yaml_text",
    "quoted",
]

KeyPath = tuple[str | int, ...]

#: a test case is a few KB; anything this large is not one
MAX_BYTES = 1024 * 1024
#: mappings and lists inside one another; a test case needs 6
MAX_DEPTH = 64
#: keys, values and list items; a large test case has a few hundred
MAX_NODES = 20_000

_CORE = "tag:yaml.org,2002:"
#: explicit tags a test case may use: YAML's plain types (``!!str 3.5``)
ALLOWED_TAGS = frozenset(
    {"!", *(_CORE + t for t in ("str", "int", "float", "bool", "null", "seq", "map"))}
)
_TAG_NAMES = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "timestamp": "a date",
    "null": "null",
}
_SURROGATE = re.compile("[\ud800-\udfff]")
_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based

    @classmethod
    def of(cls, node: yaml.Node) -> Position:
        return cls.at(node.start_mark)

    @classmethod
    def at(cls, mark: Any) -> Position:
        return cls(mark.line + 1, mark.column + 1) if mark is not None else cls(0, 0)


@dataclass
class SourceDoc:
    """Plain data parsed from a YAML file, with the position of every key and value."""

    file: str
    data: Any
    values: dict[KeyPath, Position] = field(default_factory=dict)
    keys: dict[KeyPath, Position] = field(default_factory=dict)

    def position(self, path: KeyPath, *, key: bool = False) -> Position:
        """Where ``path`` is, or the closest enclosing thing that has a position."""
        table = self.keys if key else self.values
        for cut in range(len(path), -1, -1):
            prefix = path[:cut]
            if prefix in table:
                return table[prefix]
            if prefix in self.values:
                return self.values[prefix]
        return Position(1, 1)

    def problem(self, path: KeyPath, message: str, *, key: bool = False) -> Problem:
        pos = self.position(path, key=key)
        return Problem(self.file, pos.line, pos.column, message)


def quoted(text: str) -> str:
    """``text`` in single quotes for a message, or as a Python literal when it
    holds what would break the message's one line (a newline, a control
    character): a key or value from a file is shown, never obeyed."""
    return f"'{text}'" if text.isprintable() else repr(text)


def load_yaml_file(path: Path) -> SourceDoc:
    """Read and parse ``path``; unreadable files and YAML errors raise ConfigError."""
    name = str(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError([Problem(name, 0, 0, "no such file")]) from None
    except IsADirectoryError:
        raise ConfigError([Problem(name, 0, 0, "is a directory, not a YAML file")]) from None
    except PermissionError:
        raise ConfigError([Problem(name, 0, 0, "permission denied")]) from None
    except OSError as exc:
        raise ConfigError([Problem(name, 0, 0, f"cannot read: {exc.strerror}")]) from None
    if len(raw) > MAX_BYTES:
        raise ConfigError([_too_large(name)])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - raw.rfind(b"\n", 0, exc.start)  # in bytes
        problem = Problem(name, line, column, f"not UTF-8 text ({exc.reason})")
        raise ConfigError([problem]) from None
    # Universal newlines, as reading in text mode gives them.
    return load_yaml_text(text.replace("\r\n", "\n").replace("\r", "\n"), name)


def _too_large(name: str) -> Problem:
    return Problem(
        name, 0, 0, f"larger than {MAX_BYTES // 1024} KB (1 MB): not a test case dbtester reads"
    )


class _RefusedError(Exception):
    """Something the loader does not accept, at a place in the file."""

    def __init__(self, mark: Any, message: str) -> None:
        super().__init__(message)
        self.position = Position.at(mark)
        self.message = message


def load_yaml_text(text: str, name: str = "<string>") -> SourceDoc:
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ConfigError([_too_large(name)])
    doc = SourceDoc(name, None)
    problems: list[Problem] = []
    try:
        node = _compose(text, doc, problems)
    except _RefusedError as exc:
        where = exc.position
        raise ConfigError([Problem(name, where.line, where.column, exc.message)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = exc.problem or exc.context or "invalid YAML"
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        raise ConfigError([Problem(name, line, col, f"YAML syntax error: {reason}")]) from None
    except yaml.reader.ReaderError as exc:
        line, col = _line_column(text, exc.position)
        character = exc.character if isinstance(exc.character, int) else ord(exc.character)
        message = f"character #x{character:04x} is not allowed in YAML ({exc.reason})"
        raise ConfigError([Problem(name, line, col, message)]) from None
    except yaml.YAMLError as exc:
        first = (str(exc).strip().splitlines() or ["invalid YAML"])[0]
        raise ConfigError([Problem(name, 0, 0, f"YAML error: {first}")]) from None
    if node is None:
        raise ConfigError([Problem(name, 0, 0, "the file is empty; expected a YAML mapping")])
    doc.data = _Builder(doc, problems).build(node, ())
    if problems:
        raise ConfigError(problems)
    return doc


def _line_column(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of ``text[index]``, counting YAML's line breaks."""
    line, start = 1, 0
    for found in _LINE_BREAK.finditer(text, 0, index):
        line, start = line + 1, found.end()
    return line, index - start + 1


# ---------------------------------------------------------------------- composing


def _compose(text: str, doc: SourceDoc, problems: list[Problem]) -> yaml.Node | None:
    """The single document in ``text`` as a node tree, composed from the event
    stream with an explicit stack. Anchors, aliases and unknown tags become
    ``problems`` as their events arrive (an alias is never followed: it stands
    for null); nesting deeper than MAX_DEPTH or more than MAX_NODES values stop
    the parse at once."""
    loader: Any = yaml.SafeLoader(text)  # PyYAML's parser is untyped
    try:
        loader.get_event()  # StreamStartEvent
        if loader.check_event(yaml.StreamEndEvent):
            return None
        loader.get_event()  # DocumentStartEvent
        root = _Composer(loader, doc, problems).document()
        if not loader.check_event(yaml.StreamEndEvent):
            extra = loader.get_event()
            raise _RefusedError(
                extra.start_mark, "YAML syntax error: expected a single document, found another"
            )
        return root
    finally:
        loader.dispose()


class _Composer:
    def __init__(self, loader: Any, doc: SourceDoc, problems: list[Problem]) -> None:
        self.loader = loader
        self.doc = doc
        self.problems = problems
        self.anchors = 0  # anchors and aliases seen: one problem says how many
        self.first_anchor: Any = None

    def refuse(self, mark: Any, message: str) -> None:
        where = Position.at(mark)
        self.problems.append(Problem(self.doc.file, where.line, where.column, message))

    def document(self) -> yaml.Node:
        stack: list[yaml.CollectionNode] = []
        keys: list[yaml.Node | None] = []  # for each mapping on the stack: its pending key
        root: yaml.Node | None = None
        count = 0
        while True:
            event: Any = self.loader.get_event()
            if isinstance(event, yaml.DocumentEndEvent):
                assert root is not None
                if self.anchors:
                    more = f" ({self.anchors} in this file)" if self.anchors > 1 else ""
                    self.refuse(
                        self.first_anchor,
                        f"anchors and aliases are not supported{more}: write each value out",
                    )
                return root
            if isinstance(event, yaml.CollectionEndEvent):
                done = stack.pop()
                keys.pop()
                done.end_mark = event.end_mark
                continue
            count += 1
            if count > MAX_NODES:
                raise _RefusedError(
                    event.start_mark, f"more than {MAX_NODES:,} values: not a test case"
                )
            node = self.node(event)
            if stack:
                parent = stack[-1]
                if isinstance(parent, yaml.SequenceNode):
                    parent.value.append(node)
                elif keys[-1] is None:
                    keys[-1] = node
                else:
                    parent.value.append((keys[-1], node))
                    keys[-1] = None
            else:
                root = node
            if isinstance(node, yaml.CollectionNode):
                if len(stack) >= MAX_DEPTH:
                    raise _RefusedError(
                        event.start_mark,
                        f"nested more than {MAX_DEPTH} levels deep: not a test case",
                    )
                stack.append(node)
                keys.append(None)

    def node(self, event: Any) -> yaml.Node:
        start: Any = event.start_mark
        end: Any = event.end_mark
        if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
            self.anchors += 1
            if self.first_anchor is None:
                self.first_anchor = start
            if isinstance(event, yaml.AliasEvent):  # never followed
                return yaml.ScalarNode(_CORE + "null", "", start, end)
        tag = event.tag
        if tag is not None and tag not in ALLOWED_TAGS:
            shown = "!!" + tag.removeprefix(_CORE) if tag.startswith(_CORE) else tag
            self.refuse(
                start, f"unknown YAML tag {shown!r}: test cases use plain values, without tags"
            )
            tag = None
        if isinstance(event, yaml.ScalarEvent):
            if tag is None or tag == "!":
                tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)
            return yaml.ScalarNode(tag, event.value, start, end, event.style)
        if isinstance(event, yaml.SequenceStartEvent):
            if tag is None or tag == "!":
                tag = self.loader.resolve(yaml.SequenceNode, None, event.implicit)
            return yaml.SequenceNode(tag, [], start, None, flow_style=event.flow_style)
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.MappingNode, None, event.implicit)
        return yaml.MappingNode(tag, [], start, None, flow_style=event.flow_style)


# ---------------------------------------------------------------------- building


class _Builder:
    """Plain data from a composed node tree (at most MAX_DEPTH deep)."""

    def __init__(self, doc: SourceDoc, problems: list[Problem]) -> None:
        self.doc = doc
        self.problems = problems
        self.constructor = yaml.SafeLoader("")  # only its scalar construction is used

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        self.doc.values[path] = Position.of(node)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        assert isinstance(node, yaml.ScalarNode)
        return self.scalar(node)

    def _mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[Hashable, Any]:
        out: dict[Hashable, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.problems.append(
                    _at(self.doc, key_node, "YAML merge keys (<<) are not supported")
                )
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                self.problems.append(_at(self.doc, key_node, f"keys must be strings, not a {kind}"))
                continue
            key = self.scalar(key_node)
            if not isinstance(key, str):
                if key is not _INVALID:
                    self.problems.append(
                        _at(self.doc, key_node, f"keys must be strings, not {key!r}")
                    )
                continue
            if key in out:
                self.problems.append(_at(self.doc, key_node, f"duplicate key {key!r}"))
                continue
            self.doc.keys[(*path, key)] = Position.of(key_node)
            out[key] = self.build(value_node, (*path, key))
        return out

    def scalar(self, node: yaml.ScalarNode) -> Any:
        """The scalar's value; a value its tag cannot read is a problem, not a crash."""
        try:
            value = self.constructor.construct_object(node, deep=True)
            half = _SURROGATE.search(value) if isinstance(value, str) else None
            if half:
                # a "\ud800" escape decodes to half a character, which no output can print
                message = f"{half[0]!r} is half of a UTF-16 pair, not a character"
                self.problems.append(_at(self.doc, node, message))
                return _INVALID
            return value
        except _UNREADABLE as exc:  # PyYAML's constructors fail in many ways
            self.problems.append(_at(self.doc, node, _unreadable(node, exc)))
            return _INVALID
        finally:
            self.constructor.constructed_objects.clear()


def _unreadable(node: yaml.ScalarNode, exc: Exception) -> str:
    kind = node.tag.removeprefix(_CORE)
    shown = node.value if len(node.value) <= 40 else node.value[:37] + "..."
    message = f"cannot read {shown!r} as {_TAG_NAMES.get(kind, kind)}"
    text = str(exc)
    if kind == "timestamp" and isinstance(exc, ValueError):
        return f"{message}: {text}"  # "month must be in 1..12"
    if "Exceeds the limit" in text:
        return f"{message}: {len(node.value):,} digits is too many"
    return message


#: what PyYAML's scalar constructors raise on a value their tag cannot read
#: (``!!float`` with no value: IndexError; ``2001-13-45``: ValueError; ...)
_UNREADABLE = (ValueError, TypeError, LookupError, AttributeError, ArithmeticError, yaml.YAMLError)
_INVALID = object()  # a scalar that could not be read; its problem is already recorded


def _at(doc: SourceDoc, node: yaml.Node, message: str) -> Problem:
    pos = Position.of(node)
    return Problem(doc.file, pos.line, pos.column, message)
