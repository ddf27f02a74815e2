"""The Prometheus endpoint itself, in process: a scrape racing the service's shutdown gets the
whole page or no connection — never half a page; and the page is Prometheus' text format."""

from __future__ import annotations

import http.client
import threading
import urllib.error
import urllib.request

from prometheus_client import Gauge
from prometheus_client.parser import text_string_to_metric_families

from showtell.common.exposition import PrometheusEndpoint, registry_with_build_info


def test_a_scrape_during_shutdown_gets_the_whole_page_or_no_connection():
    registry = registry_with_build_info("test")
    big = Gauge("showtell_test_value", "A page of a few hundred KB.", ["n"], registry=registry)
    for n in range(5000):
        big.labels(str(n)).set(n)
    endpoint = PrometheusEndpoint(registry, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{endpoint.port}/metrics"
    outcomes: list[str] = []
    scraped = threading.Event()

    def scrape() -> None:
        while True:
            try:
                with urllib.request.urlopen(url, timeout=10) as answer:
                    body = answer.read().decode()
            except http.client.IncompleteRead:
                outcomes.append("half a page")
                return
            except (urllib.error.URLError, ConnectionError, http.client.RemoteDisconnected):
                outcomes.append("refused")
                return
            families = {f.name: f for f in text_string_to_metric_families(body)}
            assert len(families["showtell_test_value"].samples) == 5000  # whole
            outcomes.append("whole")
            scraped.set()

    threads = [threading.Thread(target=scrape) for _ in range(4)]
    for thread in threads:
        thread.start()
    assert scraped.wait(30)
    endpoint.close()  # while the four keep scraping
    for thread in threads:
        thread.join(30)
    assert "half a page" not in outcomes and outcomes.count("refused") == 4, outcomes
    assert outcomes.count("whole") >= 1


def test_the_build_info_names_versions_and_nothing_of_the_host():
    registry = registry_with_build_info("evaluator")
    [info] = [f for f in registry.collect() if f.name == "showtell_build"]
    [sample] = info.samples
    assert set(sample.labels) == {"version", "component", "python", "tensorflow"}
    assert sample.labels["component"] == "evaluator" and sample.labels["tensorflow"].startswith("2.")


def test_close_waits_for_a_slow_scrape_to_get_its_whole_page():
    """A scraper reading slowly (a page bigger than the sockets' buffers): ``close()`` returns only
    once that page is written whole — what lets the service exit without cutting it."""
    import socket
    import time

    registry = registry_with_build_info("test")
    big = Gauge("showtell_test_value", "A page of a few MB.", ["n"], registry=registry)
    for n in range(60_000):
        big.labels(f"{n:08d}" * 4).set(n)
    endpoint = PrometheusEndpoint(registry, "127.0.0.1", 0)
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(("127.0.0.1", endpoint.port))
    reader.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
    received = bytearray(reader.recv(4096))
    closed = {}
    closer = threading.Thread(target=lambda: (endpoint.close(), closed.setdefault("at", time.monotonic())))
    closer.start()
    time.sleep(0.5)
    assert "at" not in closed  # still writing the page: close() waits
    while chunk := reader.recv(65536):
        received += chunk
        done_at = time.monotonic()
    closer.join(30)
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    [length] = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")]
    assert len(body) == length > 3_000_000
    assert closed["at"] >= done_at - 0.1
