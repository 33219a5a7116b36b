"""Load YAML while remembering where every key and value stands in the file.

PyYAML's composer gives nodes with marks; we build plain Python data from them
and keep a map from each path (a tuple of keys and list indexes) to its
line/column, so that a validation error deep in the model can still name
``file:line:column``. Duplicate keys, which PyYAML silently resolves to the
last one, are reported instead.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dbtester.errors import ConfigError, Problem

__all__ = ["KeyPath", "Position", "SourceDoc", "load_yaml_file", "load_yaml_text"]

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based

    @classmethod
    def of(cls, node: yaml.Node) -> Position:
        return cls(node.start_mark.line + 1, node.start_mark.column + 1)


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


def load_yaml_file(path: Path) -> SourceDoc:
    """Read and parse ``path``; unreadable files and YAML errors raise ConfigError."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([Problem(name, 0, 0, "no such file")]) from None
    except IsADirectoryError:
        raise ConfigError([Problem(name, 0, 0, "is a directory, not a YAML file")]) from None
    except PermissionError:
        raise ConfigError([Problem(name, 0, 0, "permission denied")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(name, 0, 0, f"not UTF-8 text ({exc.reason})")]) from None
    except OSError as exc:
        raise ConfigError([Problem(name, 0, 0, f"cannot read: {exc.strerror}")]) from None
    return load_yaml_text(text, name)


def load_yaml_text(text: str, name: str = "<string>") -> SourceDoc:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = exc.problem or exc.context or "invalid YAML"
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        raise ConfigError([Problem(name, line, col, f"YAML syntax error: {reason}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(name, 0, 0, f"YAML error: {exc}")]) from None
    if node is None:
        raise ConfigError([Problem(name, 0, 0, "the file is empty; expected a YAML mapping")])
    doc = SourceDoc(name, None)
    problems: list[Problem] = []
    doc.data = _build(node, (), doc, problems)
    if problems:
        raise ConfigError(problems)
    return doc


_constructor = yaml.SafeLoader("")  # only its scalar construction is used


def _build(node: yaml.Node, path: KeyPath, doc: SourceDoc, problems: list[Problem]) -> Any:
    doc.values[path] = Position.of(node)
    if isinstance(node, yaml.MappingNode):
        out: dict[Hashable, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                problems.append(_at(doc, key_node, "YAML merge keys (<<) are not supported"))
                continue
            key = _constructor.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                problems.append(_at(doc, key_node, f"keys must be strings, not {key!r}"))
                continue
            if key in out:
                problems.append(_at(doc, key_node, f"duplicate key {key!r}"))
                continue
            doc.keys[(*path, key)] = Position.of(key_node)
            out[key] = _build(value_node, (*path, key), doc, problems)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, i), doc, problems) for i, item in enumerate(node.value)]
    return _constructor.construct_object(node, deep=True)


def _at(doc: SourceDoc, node: yaml.Node, message: str) -> Problem:
    pos = Position.of(node)
    return Problem(doc.file, pos.line, pos.column, message)
