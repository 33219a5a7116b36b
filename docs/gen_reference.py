"""Writes the docs site's generated pages at build time (mkdocs-gen-files):
the test-case reference from the pydantic model, the results schema's
history from ``dbtester/results/schema.py``, and the ``--json`` documents'
schemas from ``dbtester/schemas/``. Nothing here is committed as
Markdown, so neither page can fall behind the code."""

from __future__ import annotations

import json
import re

import mkdocs_gen_files

from dbtester.config.reference import render_reference
from dbtester.jsonout import JSON_VERSION
from dbtester.results.schema import HISTORY, SCHEMA_VERSION
from dbtester.schemas import COMMANDS, load_schema


def schema_page() -> str:
    lines = [
        "# Results schema",
        "",
        f"Every JSON file in a results directory carries `schema_version`; this"
        f" dbtester writes version {SCHEMA_VERSION}. `dbtester analyze` reads every"
        " older version (each upgrades step by step) and refuses a newer one with"
        " exit 2, naming the file and both versions.",
        "",
    ]
    for version, change in enumerate(HISTORY, start=1):
        # reStructuredText's ``code`` in the module, Markdown's `code` here.
        text = re.sub(r"``([^`]+)``", r"`\1`", change)
        lines += [f"## Version {version}", "", text, ""]
    return "\n".join(lines)


def json_page() -> str:
    lines = [
        "# JSON output",
        "",
        "`validate`, `compare` and `history` take `--json` and then print one JSON"
        " document on stdout in place of the text; the exit code is the same as"
        ' without it. Every document carries `"dbtester_json"` (now'
        f' {JSON_VERSION}) and `"command"`. The version changes only when a field'
        " is removed or changes meaning; new fields may appear without it, so a"
        " script should ignore fields it does not know. A number JSON cannot hold"
        " (a change against a mean of 0) is `null`.",
        "",
        "The schemas (JSON Schema draft 2020-12) ship inside the package, so a"
        " script can validate against the installed version:",
        "",
        "```python",
        "from dbtester.schemas import load_schema",
        'schema = load_schema("compare")',
        "```",
        "",
    ]
    for command in COMMANDS:
        schema = load_schema(command)
        lines += [
            f"## `dbtester {command} --json`",
            "",
            schema.get("description", ""),
            "",
            "```json",
            json.dumps(schema, indent=2, ensure_ascii=False),
            "```",
            "",
        ]
    return "\n".join(lines)


with mkdocs_gen_files.open("reference/test-case.md", "w") as page:
    page.write(render_reference())
with mkdocs_gen_files.open("reference/results-schema.md", "w") as page:
    page.write(schema_page())
with mkdocs_gen_files.open("reference/json-output.md", "w") as page:
    page.write(json_page())
