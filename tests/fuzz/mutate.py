"""Hostile values and mutations shared by the harnesses.

Structured mutations work on parsed data (what ``yaml.safe_load`` or
``json.loads`` gives): replace, delete, add, rename, wrap or share a value.
Text mutations work on the characters of a file: insert YAML's special
tokens, cut, duplicate, nest deeply. Both draw from ``st.data()`` so that
Hypothesis shrinks a failing input to the few operations that matter.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "HOSTILE_TEXT",
    "YAML_TOKENS",
    "hostile_values",
    "mutate_bytes",
    "mutate_data",
    "mutate_text",
    "rarely",
    "scalars",
]

HOSTILE_TEXT = [
    "",
    " ",
    "~",
    "null",
    "yes",
    "no",
    "on",
    "0x1F",
    "0o17",
    "1_000",
    "1e3",
    ".inf",
    ".nan",
    "-.inf",
    "3.5",
    "3.5.17",
    "190:20:30",
    "2001-13-45",
    "2001-02-03",
    "2001-12-14t21:59:43.10-05:00",
    "..",
    "../outside",
    "../outside/etcd-v3.5",
    "../../../../../../tmp/outside",
    "/etc/passwd",
    "a/b",
    "a\nb",
    "a\rb",
    "a\x00b",
    "\x00",
    "\x1b[31m",
    "\x7f",
    "é",
    "\u202e",
    "\ufeff",
    "\ud7ff",
    "\ud800",  # half a UTF-16 pair: JSON and YAML write it as an escape
    "a\udcffb",
    "\U0001f600",
    "<<",
    "*a",
    "&a",
    "!tag",
    "%s%s%n",
    "{0}",
    "${HOME}",
    "$(reboot)",
    "; rm -rf /",
    "--data-dir=/",
    "-",
    "etcd",
    "zookeeper",
    "consul",
    "etcd-v3.5",
    "127.0.0.1",
    "::1",
    "[::1]",
    "10.0.0.2:2379",
    "gs://bucket/prefix",
    "s3://b/p",
    "file:///tmp/x",
]

HOSTILE_INTS = [0, -1, 1, 2, 3, 9, 10, 255, 256, 65535, 65536, 2**31, 2**32, 2**63, -(2**63) - 1]
HOSTILE_FLOATS = [0.0, -0.0, 0.5, -1.5, 1e-300, 1e300, float("inf"), float("-inf"), float("nan")]

YAML_TOKENS = [
    "&a ",
    "*a",
    "&b [*a, *a]",
    "!tag ",
    "!!binary ",
    "!!python/object/apply:os.system ",
    "!!int ",
    "!!float ",
    "!!bool ",
    "!!timestamp ",
    "!!set ",
    "!!omap ",
    "!!str ",
    "!<tag:yaml.org,2002:str> ",
    "! ",
    "<<: ",
    "<<: *a\n",
    "[",
    "]",
    "{",
    "}",
    "[[[[[[[[",
    "{a: {a: {a: {a: ",
    ": ",
    ":",
    "- ",
    "? ",
    "\n",
    "\n  ",
    "\t",
    "    ",
    "# c\n",
    "'",
    '"',
    '"\\x00"',
    '"\\ud800"',
    "|\n",
    ">-\n",
    "|2-\n",
    "---\n",
    "...\n",
    "%YAML 1.1\n---\n",
    "%TAG ! tag:example.com,2000:\n---\n",
    "%FOO bar\n",
    ",",
    "\x00",
    "\x85",
    "\ufeff",
    "\r",
    "\r\n",
    "\u2028",
    "x: &a {y: *a}\n",
    "9" * 4400,  # more digits than int() reads
    "2001-13-45",
    "1e99999",
    "0b102",
    "-.inf",
]


def rarely(draw: st.DataObject, label: str, one_in: int = 10) -> bool:
    """True about once in ``one_in`` draws. Hypothesis favours the ends of a
    range (and shrinks to its start), so the rare outcome is a value in the
    middle: examples are mostly ordinary and shrink to ordinary."""
    return draw.draw(st.integers(0, one_in - 1), label=label) == one_in // 2


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from(HOSTILE_INTS),
        st.integers(),
        st.sampled_from(HOSTILE_FLOATS),
        st.floats(),
        st.sampled_from(HOSTILE_TEXT),
        st.text(max_size=24),
        _long_text,
    )


def _repeat(char: str, times: int) -> str:
    return char * times


#: long runs of one character: a 5000-digit number, a 300-character name
_long_text = st.builds(_repeat, st.sampled_from("a9["), st.sampled_from([300, 5000]))


def hostile_values(keys: Sequence[str]) -> st.SearchStrategy[Any]:
    """Any JSON/YAML-shaped value, with keys from ``keys`` or random text."""
    key = st.one_of(st.sampled_from(list(keys)), st.text(max_size=12)) if keys else st.text()
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(key, inner, max_size=4)
        ),
        max_leaves=10,
    )


# ------------------------------------------------------------------ structured


def _slots(data: Any) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``data`` (the root is ``()``); a container
    met twice (shared, or inside itself) is entered once."""
    found: list[tuple[Any, ...]] = []
    seen: set[int] = set()
    todo: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while todo:
        value, path = todo.pop()
        found.append(path)
        if not isinstance(value, dict | list) or id(value) in seen:
            continue
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        todo.extend((v, (*path, k)) for k, v in items)
    return found


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        data = data[step]
    return data


def _typo(draw: st.DataObject, word: str) -> str:
    if not word:
        return "x"
    i = draw.draw(st.integers(0, len(word) - 1), label="typo at")
    how = draw.draw(st.sampled_from(["drop", "double", "swap", "case", "space"]), label="typo")
    if how == "drop":
        return word[:i] + word[i + 1 :]
    if how == "double":
        return word[:i] + word[i] + word[i:]
    if how == "swap" and i + 1 < len(word):
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if how == "case":
        return word.upper()
    return word + " "


MUTATIONS = ("replace", "delete", "add", "rename", "wrap", "duplicate", "share", "cycle", "swap")


class _Mutation:
    """One structured mutation at ``parent[last]`` of ``data``."""

    def __init__(self, draw: st.DataObject, keys: Sequence[str], data: Any) -> None:
        self.draw = draw
        self.keys = list(keys)
        self.values = hostile_values(keys)
        self.data = data
        self.slots = _slots(data)

    def key(self) -> str:
        return self.draw.draw(st.sampled_from(self.keys) | st.text(max_size=12), label="key")

    def apply(self, op: str, parent: Any, last: Any) -> None:
        node = parent[last]
        if op == "replace":
            parent[last] = self.draw.draw(self.values, label="value")
        elif op == "delete":
            del parent[last]
        elif op == "add":
            self.add(node)
        elif op == "rename" and isinstance(parent, dict):
            new = _typo(self.draw, str(last))
            if self.draw.draw(st.booleans(), label="known key instead"):
                new = self.key()
            parent[new] = parent.pop(last)
        elif op == "wrap":
            parent[last] = [node] if self.draw.draw(st.booleans(), label="list") else {"x": node}
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(last, copy.deepcopy(node))
        else:
            self.link(op, parent, last, node)

    def add(self, node: Any) -> None:
        if isinstance(node, dict):
            node[self.key()] = self.draw.draw(self.values, label="value")
        elif isinstance(node, list):
            at = self.draw.draw(st.integers(0, len(node)), label="index")
            node.insert(at, self.draw.draw(self.values, label="value"))

    def link(self, op: str, parent: Any, last: Any, node: Any) -> None:
        """Share a container, put one inside itself, or move a value."""
        other_path = self.draw.draw(st.sampled_from(self.slots), label="other")
        other = _get(self.data, other_path)
        if op == "share" and isinstance(other, dict | list):
            parent[last] = other
        elif op == "cycle" and isinstance(node, dict):
            node["self"] = node
        elif op == "cycle" and isinstance(node, list):
            node.append(node)
        elif op == "swap" and other_path and not isinstance(other, dict | list):
            parent[last] = other


def mutate_data(
    draw: st.DataObject,
    data: Any,
    keys: Sequence[str],
    *,
    max_ops: int = 4,
    shared: bool = True,
) -> Any:
    """``data`` after 1..max_ops structured mutations. With ``shared``, a
    mutation may make one object appear twice or inside itself (YAML's dumper
    writes that as an anchor and aliases)."""
    data = copy.deepcopy(data)
    ops = MUTATIONS if shared else tuple(m for m in MUTATIONS if m not in ("share", "cycle"))
    for _ in range(draw.draw(st.integers(1, max_ops), label="mutations")):
        mutation = _Mutation(draw, keys, data)
        path = draw.draw(st.sampled_from(mutation.slots), label="at")
        op = draw.draw(st.sampled_from(ops), label="op")
        if path:
            mutation.apply(op, _get(data, path[:-1]), path[-1])
        elif op in ("replace", "delete"):  # the root
            data = draw.draw(mutation.values, label="new root")
        elif op == "wrap":
            data = [data] if draw.draw(st.booleans(), label="list") else {"x": data}
    return data


# ------------------------------------------------------------------ text


def mutate_text(draw: st.DataObject, text: str, *, max_ops: int = 4) -> str:
    """``text`` after 1..max_ops character-level mutations."""
    for _ in range(draw.draw(st.integers(1, max_ops), label="text mutations")):
        op = draw.draw(
            st.sampled_from(
                ["insert", "cut", "dup-line", "swap-lines", "truncate", "char", "nest", "indent"]
            ),
            label="text op",
        )
        at = draw.draw(st.integers(0, len(text)), label="position")
        lines = text.split("\n")
        if op == "insert":
            token = draw.draw(st.sampled_from(YAML_TOKENS) | st.text(max_size=8), label="token")
            text = text[:at] + token + text[at:]
        elif op == "cut":
            size = draw.draw(st.integers(1, 40), label="cut size")
            text = text[:at] + text[at + size :]
        elif op == "dup-line" and lines:
            i = draw.draw(st.integers(0, len(lines) - 1), label="line")
            times = draw.draw(st.integers(1, 3), label="times")
            text = "\n".join(lines[: i + 1] + [lines[i]] * times + lines[i + 1 :])
        elif op == "swap-lines" and len(lines) > 1:
            i = draw.draw(st.integers(0, len(lines) - 2), label="line")
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
            text = "\n".join(lines)
        elif op == "truncate":
            text = text[:at]
        elif op == "char":
            text = text[:at] + draw.draw(st.characters(), label="char") + text[at + 1 :]
        elif op == "nest":
            depth = draw.draw(
                st.integers(1, 80) | st.sampled_from([100, 1000, 5000]), label="depth"
            )
            opener, closer = draw.draw(
                st.sampled_from([("[", "]"), ("{a: ", "}"), ("- ", ""), ("[{a: ", "}]")]),
                label="nesting",
            )
            text = text[:at] + opener * depth + "1" + closer * depth + text[at:]
        elif op == "indent" and lines:
            i = draw.draw(st.integers(0, len(lines) - 1), label="line")
            lines[i] = " " * draw.draw(st.integers(0, 9), label="spaces") + lines[i].lstrip()
            text = "\n".join(lines)
    return text


def mutate_bytes(draw: st.DataObject, blob: bytes, *, max_ops: int = 4) -> bytes:
    """``blob`` after 1..max_ops byte-level mutations (flip, cut, insert, truncate)."""
    data = bytearray(blob)
    for _ in range(draw.draw(st.integers(1, max_ops), label="byte mutations")):
        op = draw.draw(st.sampled_from(["flip", "cut", "insert", "truncate", "zero"]), label="op")
        at = draw.draw(st.integers(0, max(0, len(data) - 1)), label="offset")
        if op == "flip" and data:
            data[at] ^= 1 << draw.draw(st.integers(0, 7), label="bit")
        elif op == "cut":
            del data[at : at + draw.draw(st.integers(1, 64), label="size")]
        elif op == "insert":
            data[at:at] = draw.draw(st.binary(min_size=1, max_size=16), label="bytes")
        elif op == "truncate":
            del data[at:]
        elif op == "zero" and data:
            size = draw.draw(st.integers(1, 16), label="size")
            data[at : at + size] = bytes(len(data[at : at + size]))
    return bytes(data)
