"""The gRPC server: metrics service + ``grpc.health.v1`` + server reflection, on ``grpc.aio``.

One event loop serves every call; a ``Watch`` stream is a suspended coroutine, so open
streams cost memory rather than a worker thread each (the thread-pool server it replaced
stopped answering — health checks included — at its 33rd stream).  Keepalive pings find
clients that vanished without closing their connection, so their streams are dropped.
"""

from __future__ import annotations

import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from showtell.api.transport import LoadedSecurity
from showtell.evaluator.serving.service import MetricsService
from showtell.v1 import metrics_pb2 as pb
from showtell.v1 import metrics_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["MetricsService"].full_name
MAX_REQUEST_BYTES = 1 << 20  # every request is a few fields; a larger one is refused by gRPC
SERVER_OPTIONS = [
    ("grpc.keepalive_time_ms", 60_000),  # ping a connection after 60 s without traffic …
    ("grpc.keepalive_timeout_ms", 20_000),  # … and drop it if the ping is not answered in 20 s
    ("grpc.http2.max_pings_without_data", 0),  # an idle Watch sends no data: keep pinging it
    ("grpc.keepalive_permit_without_calls", 1),
    # clients may ping every 10 s (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS; its
    # default, 5 min, answers a client pinging a quiet Watch every 30 s with GOAWAY too_many_pings)
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
    ("grpc.so_reuseport", 0),  # a second evaluator on the same port fails instead of sharing it
]


class MetricsServer:
    """Builds the server; ``start``/``stop`` are coroutines on the loop that serves it.

    ``health_port``: the health service also alone on a second, plaintext port (no token, no
    TLS: it says SERVING or NOT_SERVING, nothing else) — Kubernetes' gRPC probes cannot do TLS.
    ``service`` None: health alone (a split evaluation's part that part 0 answers for).
    """

    def __init__(self, service: MetricsService | None, host: str = "127.0.0.1", port: int = 0,
                 security: LoadedSecurity | None = None, health_port: int | None = None) -> None:
        self.service = service
        self.security = security or LoadedSecurity()
        self.server = grpc.aio.server(interceptors=self.security.interceptors, options=SERVER_OPTIONS)
        self.names = (SERVICE_NAME,) if service is not None else ()
        if service is not None:
            pb_grpc.add_MetricsServiceServicer_to_server(service, self.server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (*self.names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
             reflection.SERVICE_NAME),
            self.server,
        )
        address = f"{host}:{port}"
        if self.security.credentials is None:
            self.port = self.server.add_insecure_port(address)
        else:
            self.port = self.server.add_secure_port(address, self.security.credentials)
        self.host = host
        self.health_server: grpc.aio.Server | None = None
        self.health_port: int | None = None
        if health_port is not None:
            self.health_server = grpc.aio.server(options=SERVER_OPTIONS)
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self.health_server)
            self.health_port = self.health_server.add_insecure_port(f"{host}:{health_port}")

    async def start(self) -> None:
        await self.server.start()
        if self.health_server is not None:
            await self.health_server.start()
        for name in ("", *self.names):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("serving %s on %s:%d; %s%s", f"{SERVICE_NAME} (+ health, reflection)" if self.names
                 else "grpc.health.v1 alone (+ reflection; another evaluator serves the metrics)",
                 self.host, self.port,
                 self.security.source.describe(),
                 "" if self.health_port is None else f"; health alone, plaintext, on port {self.health_port}")
        if self.security.source.clear_text_token:
            log.warning("a bearer token without TLS crosses the network in clear text; "
                        "add --tls-cert/--tls-key")

    async def stop(self, grace: float = 2.0) -> None:
        await self.health.enter_graceful_shutdown()
        if self.service is not None:
            self.service.close()  # open Watch streams end UNAVAILABLE
        await self.server.stop(grace)
        if self.health_server is not None:
            await self.health_server.stop(grace)
