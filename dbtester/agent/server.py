"""``dbtester agent serve``: the gRPC server, its health service, TLS and signals."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from concurrent import futures
from types import FrameType

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dbtester.agent.auth import AuthInterceptor, is_loopback_peer
from dbtester.agent.config import AgentConfig, read_token
from dbtester.agent.isolation import sweep
from dbtester.agent.service import AgentService
from dbtester.errors import DbtesterError
from dbtester.proto import agent_pb2_grpc as pb_grpc
from dbtester.util.paths import ensure_writable

__all__ = ["AgentServer", "serve"]

log = logging.getLogger("dbtester.agent")

SERVICE_NAME = "dbtester.agent.v1.Agent"


class AgentServer:
    """A started agent: ``port`` is where it listens (useful with port 0)."""

    def __init__(self, config: AgentConfig) -> None:
        token = read_token(config.token_file) if config.token_file else None
        ensure_writable(config.data_root)
        self.config = config
        self.service = AgentService(config)
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="rpc"),
            interceptors=[AuthInterceptor(token, self.service.touch)],
        )
        pb_grpc.add_AgentServicer_to_server(self.service, self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = self._bind(config)
        self.service.agent_port = self.port
        # An agent killed outright could not heal: its isolation of this host
        # would outlive it. Its successor on the same port removes it.
        for table in sweep(self.port):
            log.warning("removed isolation table inet %s an earlier agent left", table)
        if token is None and not _is_loopback_listen(config.listen):
            log.warning(
                "no --token-file: only loopback clients will be served on %s", config.listen
            )

    def _bind(self, config: AgentConfig) -> int:
        try:
            if config.tls is None:
                port = self.server.add_insecure_port(config.listen)
            else:
                port = self.server.add_secure_port(config.listen, _credentials(config))
        except RuntimeError as exc:
            raise DbtesterError(f"cannot listen on {config.listen}: {exc}") from None
        if port == 0:
            raise DbtesterError(
                f"cannot listen on {config.listen}: address in use or not on this machine"
            )
        return port

    def start(self) -> None:
        self.server.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace: float = 2.0) -> None:
        """Stop every database (keeping its files), then the server."""
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        # Databases first: an orphaned agent must not spend the server's grace
        # period before it even signals them. Start refuses once closing began.
        self.service.close()
        self.server.stop(grace).wait()
        self.service.close()  # a Start that raced the first close


def _credentials(config: AgentConfig) -> grpc.ServerCredentials:
    assert config.tls is not None
    try:
        key = config.tls.key.read_bytes()
        cert = config.tls.cert.read_bytes()
        ca = config.tls.ca.read_bytes() if config.tls.ca else None
    except OSError as exc:
        raise DbtesterError(f"cannot read TLS file {exc.filename}: {exc.strerror}") from None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


def _is_loopback_listen(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or is_loopback_peer(f"ipv4:{host}:0")


def serve(config: AgentConfig) -> None:
    """Run until SIGTERM or SIGINT; then stop the databases and exit."""
    server = AgentServer(config)
    server.start()
    host = config.listen.rsplit(":", 1)[0]
    # The first line on stdout names the bound port (the controller reads it).
    print(f"dbtester agent listening on {host}:{server.port}", flush=True)
    log.info(
        "agent %s serving on %s:%d (data root %s)",
        SERVICE_NAME,
        host,
        server.port,
        config.data_root,
    )
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: stopping databases", signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    done.wait()
    server.stop()
    log.info("agent stopped")
    sys.stdout.flush()
