"""dbtester's own calls to Consul's HTTP API (readiness, the leader,
counting keys, the maintenance events, the pre-fill): HTTPS with the test
case's TLS and the ACL token in every request when it has them; and the
ACL bootstrap that makes the token on members dbtester starts."""

from __future__ import annotations

import functools
import http.client
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

from dbtester.databases.base import Access, TlsFiles

__all__ = ["bootstrap_acl", "open_url", "url"]

#: the header Consul reads a request's ACL token from
TOKEN_HEADER = "X-Consul-Token"


def url(address: str, path: str, access: Access) -> str:
    """``path`` (with its leading slash) on the member at ``address`` (host:port)."""
    return f"{access.scheme}://{address}{path}"


def open_url(
    address: str,
    path: str,
    access: Access,
    timeout: float,
    *,
    method: str = "GET",
    data: bytes | None = None,
) -> Any:
    """The reply to ``method`` ``path`` (urllib's: HTTPError for a status
    of 400 or more, OSError when the member does not answer)."""
    request = urllib.request.Request(url(address, path, access), data=data, method=method)
    if access.secret:
        request.add_header(TOKEN_HEADER, access.secret)
    return _opener(access.tls).open(request, timeout=timeout)


def bootstrap_acl(addresses: list[str], access: Access, timeout: float) -> None:
    """Consul's one ACL bootstrap (asked of the first member), with the test
    case's token as the management token's secret (Consul takes a secret of
    our choosing); then every member's agent token set to it, each member
    asked until the token has reached it through Raft (``timeout`` s)."""
    body = json.dumps({"BootstrapSecret": access.secret}).encode()
    anonymous = Access(tls=access.tls)
    bootstrap = "/v1/acl/bootstrap"
    with open_url(addresses[0], bootstrap, anonymous, timeout, method="PUT", data=body) as reply:
        reply.read()
    agent = json.dumps({"Token": access.secret}).encode()
    deadline = time.monotonic() + timeout
    for address in addresses:
        while True:
            try:
                path = "/v1/agent/token/agent"
                with open_url(address, path, access, timeout, method="PUT", data=agent) as reply:
                    reply.read()
                break
            except urllib.error.HTTPError as exc:
                # 403 "ACL not found": the token has not reached this member yet
                if exc.code != 403 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


@functools.lru_cache(maxsize=8)
def _opener(tls: TlsFiles | None) -> urllib.request.OpenerDirector:
    """An opener that speaks TLS as ``tls`` says (plain HTTP without it);
    one per TLS setting, its context loaded once."""
    if tls is None:
        return urllib.request.build_opener()
    context = ssl.create_default_context(cafile=str(tls.ca))
    if tls.cert is not None:
        context.load_cert_chain(str(tls.cert), str(tls.key) if tls.key else None)
    if tls.server_name:
        return urllib.request.build_opener(_NamedHandler(context, tls.server_name))
    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))


class _NamedConnection(http.client.HTTPSConnection):
    """HTTPS that checks the server's certificate for ``server_name`` rather
    than for the address dialled (a test case's tls.server_name)."""

    def __init__(self, *args: Any, server_name: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._server_name = server_name

    def connect(self) -> None:
        raw = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self._server_name)  # type: ignore[attr-defined]


class _NamedHandler(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext, server_name: str) -> None:
        super().__init__(context=context)
        self._named = functools.partial(_NamedConnection, server_name=server_name)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._named, req, context=self._context)  # type: ignore[attr-defined]
