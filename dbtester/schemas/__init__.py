"""JSON Schemas (draft 2020-12) of the documents ``--json`` prints: one file
per command, ``<command>.schema.json``, shipped inside the package so that a
script (or a test) can validate what it reads against the installed version.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["COMMANDS", "load_schema"]

#: the commands with a ``--json`` document
COMMANDS = ("validate", "compare", "history")


def load_schema(command: str) -> dict[str, Any]:
    """The schema of ``command``'s ``--json`` document."""
    if command not in COMMANDS:
        raise KeyError(f"no JSON schema for {command!r}; there are: {', '.join(COMMANDS)}")
    text = resources.files(__name__).joinpath(f"{command}.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
