"""The services' Prometheus endpoint: ``--prometheus-port`` serves a registry's metrics in
Prometheus' text format over HTTP, on a thread that sleeps between scrapes.

Built on ``prometheus_client``'s WSGI app, but with a server that lets each scrape finish
writing when the service stops (``close``): a scrape during shutdown gets its whole page or a
refused connection, never half of one.  The page holds numbers, run ids and versions only — no
paths, tokens or host names.
"""

from __future__ import annotations

import logging
import platform
import socket
import threading
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Info, make_wsgi_app

from showtell.common.errors import ShowtellError
from showtell.common.options import option
from showtell.common.versions import NOT_INSTALLED, installed_version

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MonitoringConfig:
    """Where a service serves its Prometheus metrics (off unless a port is given)."""

    prometheus_port: int | None = option(
        None, "serve Prometheus metrics over HTTP on --prometheus-host:PORT at /metrics (0: any free "
              "port; default: off)", type=int, metavar="PORT", shown=True)
    prometheus_host: str = option("127.0.0.1", "the metrics' bind address (0.0.0.0 in a container, "
                                               "for the scraper)")


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = False  # close() joins the scrapes in flight: each page is written whole
    block_on_close = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:
        """No line per scrape (one every 15 s for as long as the service runs)."""


class PrometheusEndpoint:
    """``registry`` served on ``host:port`` until ``close``."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        server_class = type("_Server", (_Server,), {"address_family": _family(host, port)})
        try:
            self._server = make_server(host, port, make_wsgi_app(registry), server_class,
                                       handler_class=_QuietHandler)
        except OSError as exc:
            raise ShowtellError(f"--prometheus-host {host} --prometheus-port {port}: cannot listen there "
                                f"({exc.strerror or exc}); pick another --prometheus-port (0: any free one)"
                                ) from None
        self.registry, self.host, self.port = registry, host, self._server.server_address[1]
        # poll_interval: how soon close() is noticed; between scrapes the thread sleeps in select()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="prometheus", daemon=True)
        self._thread.start()
        log.info("Prometheus metrics on http://%s:%d/metrics", host, self.port)

    def close(self) -> None:
        """Stop accepting scrapes, finish those in flight, release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _family(host: str, port: int) -> socket.AddressFamily:
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    except socket.gaierror:
        raise ShowtellError(f"--prometheus-host {host}: not an address of this machine") from None


def registry_with_build_info(component: str) -> CollectorRegistry:
    """A fresh registry holding ``showtell_build_info``: the version, the component, Python's and
    TensorFlow's versions (read from the installed packages: nothing is imported for it)."""
    registry = CollectorRegistry()
    tensorflow = next((v for v in map(installed_version, ("tensorflow", "tensorflow-cpu"))
                       if v != NOT_INSTALLED), "")
    Info("showtell_build", "The running showtell's version and what it runs on.", registry=registry).info({
        "version": installed_version(), "component": component, "python": platform.python_version(),
        "tensorflow": tensorflow})
    return registry


def serve(component: str, config: MonitoringConfig) -> PrometheusEndpoint | None:
    """The endpoint ``config`` asks for, serving a registry with the build info to which the
    service adds its figures; None when ``--prometheus-port`` is not given.  Started first, before
    TensorFlow loads: a port in use fails in one line, at once."""
    if config.prometheus_port is None:
        return None
    registry = registry_with_build_info(component)
    return PrometheusEndpoint(registry, config.prometheus_host, config.prometheus_port)
