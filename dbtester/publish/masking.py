"""Messages fit to show: no credentials, signatures or query strings."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = ["sanitize"]

_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|ACCESS_KEY|API_KEY", re.I)
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"<>]*@")
_QUERY = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s?#'\"<>]*)[?#][^\s'\"<>]*")
_SIGNED = re.compile(
    r"\b(X-Amz-[A-Za-z-]+|X-Goog-[A-Za-z-]+|Signature|AWSAccessKeyId|access_token|Credential)"
    r"=[^&\s'\"]+",
    re.I,
)


def sanitize(message: str, env: Mapping[str, str] | None = None) -> str:
    """``message`` fit to show: URLs lose user info and query strings (signed
    URLs carry their signature there), signing parameters are masked, and so
    is the value of every environment variable named like a credential."""
    env = os.environ if env is None else env
    text = _USERINFO.sub(r"\1", message)
    text = _QUERY.sub(r"\1", text)
    text = _SIGNED.sub(lambda m: f"{m[1]}=***", text)
    for name, value in env.items():
        if len(value) >= 6 and _SECRET_NAME.search(name) and value in text:
            text = text.replace(value, "***")
    return text
