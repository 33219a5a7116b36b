"""The README as published: relative links become the bucket's public URLs,
so the published copy shows its charts wherever it is read."""

from __future__ import annotations

import posixpath
import re

__all__ = ["published_readme"]

# An inline link or image, [text](target) or ![alt](target "title"), and a
# reference definition, [name]: target.
_INLINE = re.compile(r"(!?\[[^\]\n]*\]\()([^()\s]+)((?:\s+\"[^\"\n]*\")?\))")
_REFERENCE = re.compile(r"^( {0,3}\[[^\]\n]+\]:[ \t]*)(\S+)")
_HAS_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def published_readme(text: str, base: str | None) -> str:
    """The README as published: every relative link target below the results
    directory becomes ``base/target``. Text in fenced code blocks (the table)
    and absolute links are left alone; ``base=None`` returns ``text`` as is."""
    if base is None:
        return text
    lines, fenced = [], False
    for line in text.splitlines(keepends=True):
        out = line
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            out = _INLINE.sub(lambda m: m[1] + _absolute(m[2], base) + m[3], out)
            out = _REFERENCE.sub(lambda m: m[1] + _absolute(m[2], base), out)
        lines.append(out)
    return "".join(lines)


def _absolute(target: str, base: str) -> str:
    if _HAS_SCHEME.match(target) or target.startswith(("/", "#", "?")):
        return target
    path = posixpath.normpath(target)
    if path == ".." or path.startswith("../"):
        return target  # outside the results directory: not published, nothing to point at
    return f"{base}/" if path == "." else f"{base}/{path}"
