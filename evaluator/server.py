"""The gRPC server: metrics service + ``grpc.health.v1`` + server reflection."""

from __future__ import annotations

import logging
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from evaluator.service import MetricsService
from showtell.transport import LoadedSecurity
from showtell.v1 import metrics_pb2 as pb
from showtell.v1 import metrics_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Metrics"].full_name


class MetricsServer:
    def __init__(self, service: MetricsService, host: str = "127.0.0.1", port: int = 0,
                 max_workers: int = 32, security: LoadedSecurity | None = None) -> None:
        self.service = service
        self.security = security or LoadedSecurity()
        # Each Watch stream holds a worker thread for its lifetime; size the pool for them.
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                             thread_name_prefix="grpc"),
                                  interceptors=self.security.interceptors)
        pb_grpc.add_MetricsServicer_to_server(service, self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
             reflection.SERVICE_NAME),
            self.server,
        )
        address = f"{host}:{port}"
        if self.security.credentials is None:
            self.port = self.server.add_insecure_port(address)
        else:
            self.port = self.server.add_secure_port(address, self.security.credentials)
        self.host = host

    def start(self) -> None:
        self.server.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("serving %s (+ health, reflection) on %s:%d; %s", SERVICE_NAME, self.host, self.port,
                 self.security.source.describe())
        if self.security.source.clear_text_token:
            log.warning("a bearer token without TLS crosses the network in clear text; "
                        "add --tls-cert/--tls-key")

    def stop(self, grace: float = 2.0) -> None:
        self.service.closing = True
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
