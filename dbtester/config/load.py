"""Load a test case strictly: every problem is reported with file:line:column.

The original dbtester's format is recognised and converted (see ``legacy``);
what the conversion cannot carry over comes back as warnings.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from dbtester.config import legacy
from dbtester.config.model import (
    ENDPOINT_PATTERN,
    HOST_PATTERN,
    ID_PATTERN,
    SCHEMA_KEYS,
    UNION_TAGS,
    TestCase,
    version_hint,
)
from dbtester.config.search import first_probe_requests, search_conflicts
from dbtester.config.source import KeyPath, SourceDoc, load_yaml_file, load_yaml_text, quoted
from dbtester.databases import KINDS
from dbtester.errors import ConfigError, Problem
from dbtester.workloads import TYPES, owners
from dbtester.workloads.base import KeyValueError

__all__ = ["Loaded", "load_test_case", "load_test_case_text", "parse_test_case"]


@dataclass(frozen=True)
class Loaded:
    """A validated test case, the file it came from, and what was worth a warning."""

    case: TestCase
    source: str
    legacy: bool
    warnings: tuple[Problem, ...]


def load_test_case(path: str | Path) -> Loaded:
    return parse_test_case(load_yaml_file(Path(path)))


def load_test_case_text(text: str, name: str = "<string>") -> Loaded:
    return parse_test_case(load_yaml_text(text, name))


def parse_test_case(doc: SourceDoc) -> Loaded:
    if not isinstance(doc.data, dict):
        kind = type(doc.data).__name__
        raise ConfigError([doc.problem((), f"expected a mapping of keys at the top, got a {kind}")])
    warnings: list[Problem] = []
    is_legacy = legacy.is_legacy(doc.data)
    if is_legacy:
        doc, warnings = legacy.convert(doc)
    raw = _with_effective_workloads(_searched(doc))
    try:
        case = TestCase.model_validate(raw, context={"folder": _folder(doc)})
    except ValidationError as exc:
        raise ConfigError(_problems(doc, raw, exc.errors())) from None
    warnings.extend(_read_workload_warnings(doc, case))
    case, fitted = _fit_flags(doc, case)
    warnings.extend(fitted)
    return Loaded(case, doc.file, is_legacy, tuple(sorted(set(warnings))))


def _folder(doc: SourceDoc) -> Path:
    """What a relative path in the test case is taken from: its file's
    folder (the working directory for text that came from no file)."""
    file = Path(doc.file)
    return file.parent.absolute() if file.is_file() else Path.cwd()


def _fit_flags(doc: SourceDoc, case: TestCase) -> tuple[TestCase, list[Problem]]:
    """Each kind adjusts its flags to the workload's connection count (ZooKeeper's
    per-address connection limit), saying so; a setting that cannot fit is an
    error at the database's entry."""
    notes: list[Problem] = []
    problems: list[Problem] = []
    databases = []
    for i, db in enumerate(case.databases):
        if db.endpoints:  # an existing cluster: its settings are not ours to change
            databases.append(db)
            continue
        where: KeyPath = ("databases", i, "flags")
        if where not in doc.values:
            where = ("databases", i)
        try:
            flags, note = KINDS[db.kind].fit_flags(db.flags, db.workload.connections)
        except ValueError as exc:
            problems.append(doc.problem(where, str(exc)))
            databases.append(db)
            continue
        if note:
            notes.append(doc.problem(where, f"{db.id}: {note}", key=True))
        databases.append(db.model_copy(update={"flags": flags}) if note else db)
    if problems:
        raise ConfigError(problems)
    return case.model_copy(update={"databases": tuple(databases)}), notes


def _searched(doc: SourceDoc) -> dict[str, Any]:
    """A test case with ``search``: what the search sets itself is refused at
    its line; the workload's ``requests`` is the first probe's."""
    data: dict[str, Any] = doc.data
    if data.get("search") is None:
        return data
    problems = [doc.problem(where, why, key=True) for where, why in search_conflicts(data)]
    if problems:
        raise ConfigError(problems)
    workload = data.get("workload")
    if not isinstance(workload, dict):
        return data
    requests = first_probe_requests(data["search"])
    return {**data, "workload": {**workload, "requests": requests}}


def _with_effective_workloads(data: dict[str, Any]) -> dict[str, Any]:
    """Give every database entry the full workload: the test case's, updated by
    the entry's own ``workload`` overrides. Errors in the merged workload are
    located at the override when it set the key, else at the test case's key."""
    base = data.get("workload")
    databases = data.get("databases")
    if not isinstance(base, dict) or not isinstance(databases, list):
        return data
    merged = []
    for entry in databases:
        own = entry.get("workload", {}) if isinstance(entry, dict) else None
        if isinstance(own, dict):
            merged.append({**entry, "workload": {**base, **own}})
        else:
            merged.append(entry)
    return {**data, "databases": merged}


def _locate(doc: SourceDoc, path: KeyPath) -> KeyPath:
    """Map a path in the merged data back to where the value is written."""
    in_override = len(path) > 3 and path[0] == "databases" and path[2] == "workload"
    if in_override and path not in doc.values:
        return ("workload", *path[3:])
    return path


def _clean_loc(raw: Any, loc: tuple[int | str, ...]) -> tuple[KeyPath, list[str | int]]:
    """Drop the union tags pydantic puts in locations (…, 0, 'etcd', 'flags') and
    return the path plus what remains unresolved (a missing key, an extra key)."""
    path: list[str | int] = []
    node = raw
    rest = list(loc)
    while rest:
        step = rest[0]
        if isinstance(node, dict) and isinstance(step, str) and step not in node:
            if step in (node.get("kind"), node.get("type")) or step in UNION_TAGS:  # a tag
                rest.pop(0)
                continue
            break
        if not _has(node, step):
            break
        node = node[step]
        path.append(step)
        rest.pop(0)
    return tuple(path), rest


def _has(node: Any, step: str | int) -> bool:
    if isinstance(node, list):
        return isinstance(step, int) and 0 <= step < len(node)
    return isinstance(node, dict) and step in node


def _problems(doc: SourceDoc, raw: dict[str, Any], errors: list[ErrorDetails]) -> list[Problem]:
    found: dict[Problem, KeyPath] = {}
    locs = [err["loc"] for err in errors]
    for err in errors:
        # A list that is "too short" only because its items were invalid says nothing new.
        if any(len(o) > len(err["loc"]) and o[: len(err["loc"])] == err["loc"] for o in locs):
            continue
        path, rest = _clean_loc(raw, err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            key = str(rest[0]) if rest else str(path[-1])
            parent = path if rest else path[:-1]
            where = _locate(doc, (*parent, key))
            found[doc.problem(where, _unknown_key(key, raw, parent), key=True)] = path
            continue
        if kind == "union_tag_invalid":
            path = (*path, _tag(err))
        problem = err.get("ctx", {}).get("error")
        if isinstance(problem, KeyValueError):
            found[doc.problem(_locate(doc, (*path, problem.key)), str(problem))] = path
            continue
        where = _locate(doc, path)
        if kind == "missing" and rest:
            found[doc.problem(where, f"missing required key '{rest[0]}'")] = path
        else:
            found[doc.problem(where, _message(err, path))] = path
    return sorted(_once(found))


def _once(found: dict[Problem, KeyPath]) -> list[Problem]:
    """Each database takes the test case's workload (and overrides some of
    its keys): a mistake in it is reported at the test case's workload only,
    not again at every database that inherits it."""
    shared = {p.message for p, path in found.items() if path[:1] == ("workload",)}
    return [
        p for p, path in found.items() if not (_in_database_workload(path) and p.message in shared)
    ]


def _in_database_workload(path: KeyPath) -> bool:
    return len(path) >= 3 and path[0] == "databases" and path[2] == "workload"


def _tag(err: ErrorDetails) -> str:
    """The key a discriminated union's tag is in: a workload's ``type``, else ``kind``."""
    return str(err.get("ctx", {}).get("discriminator", "'kind'")).strip("'")


def _unknown_key(key: str, raw: dict[str, Any], parent: KeyPath) -> str:
    if _section(parent) == "workload" and (wrong := _other_types_key(key, raw, parent)):
        return wrong
    allowed = _allowed_keys(raw, parent)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"unknown key {quoted(key)}{hint} (allowed here: {', '.join(allowed)})"


def _allowed_keys(raw: dict[str, Any], parent: KeyPath) -> list[str]:
    section = _section(parent)
    if section in ("flags", "client", "auth") and len(parent) >= 2:
        entry = raw["databases"][parent[1]]
        name = entry.get("kind") if isinstance(entry, dict) else None
        kind = KINDS.get(name) if isinstance(name, str) else None
        if kind is not None:
            models = {"flags": kind.flags_model, "client": kind.client_model}
            model = models.get(section, kind.auth_model)
            return list(model.model_fields) if model else []
        return []
    if section == "workload":
        workload_type = TYPES.get(str(_node(raw, parent).get("type")))
        if workload_type is not None:
            return list(workload_type.model_fields)
    return list(SCHEMA_KEYS.get(section, ()))


def _node(raw: dict[str, Any], path: KeyPath) -> dict[str, Any]:
    """The mapping at ``path`` in ``raw`` (empty when there is none)."""
    node: Any = raw
    for step in path:
        node = node[step] if _has(node, step) else {}
    return node if isinstance(node, dict) else {}


def _section(parent: KeyPath) -> str:
    names = [p for p in parent if isinstance(p, str)]
    if not names:
        return ""
    last = names[-1]
    if last == "databases":
        return "database"
    if last in ("hosts", "load_hosts"):
        return "host"
    return last


# pydantic error types -> what to tell the user ({name}, {got} are filled in)
_PLAIN_MESSAGES = {
    "int_type": "{name}: expected a whole number, got {got}",
    "int_parsing": "{name}: expected a whole number, got {got}",
    "int_from_float": "{name}: expected a whole number, got {got}",
    "bool_type": "{name}: expected true or false, got {got}",
    "bool_parsing": "{name}: expected true or false, got {got}",
    "float_type": "{name}: expected a number, got {got}",
    "float_parsing": "{name}: expected a number, got {got}",
    "string_type": "{name}: expected text, got {got}",
    "model_type": "{name}: expected a mapping of keys, got {got}",
    "dict_type": "{name}: expected a mapping of keys, got {got}",
    "model_attributes_type": "{name}: expected a mapping of keys, got {got}",
    "tuple_type": "{name}: expected a list, got {got}",
    "list_type": "{name}: expected a list, got {got}",
    "too_short": "{name}: must not be empty",
    "union_tag_not_found": "missing required key 'kind' (one of: {kinds})",
}
_RANGES = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _message(err: ErrorDetails, path: KeyPath) -> str:
    kind = err["type"]
    value = err.get("input")
    name = _name(path)
    if name == "version" and (hint := version_hint(value)):
        return hint
    if kind.startswith("union_tag") and _tag(err) == "type":
        return _type_message(kind, value)
    if kind in _PLAIN_MESSAGES:
        return _PLAIN_MESSAGES[kind].format(name=name, got=_show(value), kinds=", ".join(KINDS))
    ctx = err.get("ctx", {})
    if kind == "union_tag_invalid":
        given = value.get("kind") if isinstance(value, dict) else value
        return f"unknown kind {given!r}; allowed: {', '.join(KINDS)}"
    if kind == "literal_error":
        allowed = str(ctx.get("expected", "")).replace(" or ", ", ")
        return f"{name}: {value!r} is not allowed; allowed: {allowed}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        rule = PATTERN_RULES.get(pattern, f"must match {pattern}")
        return f"{name}: {value!r} is not valid: {rule}"
    if kind in _RANGES:
        bound = err["msg"].replace("Input should be ", "must be ")
        return f"{name}: {value!r} is out of range: {bound}"
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    return f"{name}: {err['msg']}"


def _type_message(kind: str, value: Any) -> str:
    """A workload's ``type`` missing or unknown, with the types there are."""
    if kind == "union_tag_not_found":
        return f"missing required key 'type' (one of: {', '.join(TYPES)})"
    given = value.get("type") if isinstance(value, dict) else value
    return f"type: {given!r} is not allowed; allowed: {', '.join(TYPES)}"


PATTERN_RULES = {
    ID_PATTERN: "use lowercase letters, digits and . _ - (e.g. etcd-v3.5)",
    ENDPOINT_PATTERN: "expected HOST:PORT (e.g. 127.0.0.1:2379)",
    HOST_PATTERN: "expected an IP address or host name",
}


def _name(path: KeyPath) -> str:
    """'endpoints[0]' for ('databases', 0, 'endpoints', 0); the key for a plain key."""
    name = ""
    for step in reversed(path):
        if isinstance(step, int):
            name = f"[{step}]{name}"
        else:
            return f"{step}{name}"
    return name or "value"


def _show(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return f"{type(value).__name__} {value!r}"


def _other_types_key(key: str, raw: dict[str, Any], parent: KeyPath) -> str | None:
    """A key of another workload type, said so (None: no type has it)."""
    given = _node(raw, parent).get("type")
    workload_type = TYPES.get(str(given))
    types = owners(key)
    if workload_type is None or not types:
        return None
    reason = workload_type.REFUSED.get(key)
    if reason:
        return f"{key} means nothing for type: {given} ({reason}); remove it"
    return f"{key} is for type: {' and '.join(types)} only, not {given}; remove it"


def _read_workload_warnings(doc: SourceDoc, case: TestCase) -> list[Problem]:
    """Keys that mean nothing for a workload's type but are harmless (a read's
    ``same_key``, a write's ``consistency``) are flagged, never silently dropped."""
    found = []
    for i, db in enumerate(case.databases):
        workload = db.workload
        for key in workload.IGNORED:
            only = " and ".join(owners(key))
            for path in (("databases", i, "workload", key), ("workload", key)):
                if path in doc.values:
                    found.append(
                        doc.problem(
                            path,
                            f"'{key}' applies to {only} workloads only;"
                            f" ignored for {workload.type}s",
                            key=True,
                        )
                    )
                    break
    return found
