"""Writes the docs site's generated pages at build time (mkdocs-gen-files):
the test-case reference from the pydantic model, and the results schema's
history from ``dbtester/results/schema.py``. Nothing here is committed as
Markdown, so neither page can fall behind the code."""

from __future__ import annotations

import re

import mkdocs_gen_files

from dbtester.config.reference import render_reference
from dbtester.results.schema import HISTORY, SCHEMA_VERSION


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


with mkdocs_gen_files.open("reference/test-case.md", "w") as page:
    page.write(render_reference())
with mkdocs_gen_files.open("reference/results-schema.md", "w") as page:
    page.write(schema_page())
