"""gRPC beyond localhost: TLS and the bearer token, on real evaluator processes.

Certificates: ``tests/pki.py`` (``openssl``); the server's is issued to ``evaluator`` only, so
dialing 127.0.0.1 also exercises ``--tls-server-name``.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from showtell.v1 import metrics_pb2 as pb
from showtell.v1 import metrics_pb2_grpc as pb_grpc
from tests.helpers import error_lines, run_showtell, start_evaluator, wait_for
from tests.pki import SERVER_NAME, make_pki

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def trained(tiny_model: Path) -> Path:
    return tiny_model  # read only: evaluators write to their own work dirs


def _metrics(port: int, *args: str) -> subprocess.CompletedProcess:
    return run_showtell("metrics", args[0], "--server", f"127.0.0.1:{port}", "--timeout", "5", *args[1:],
                        timeout=60)


def _tls_channel(port: int, pki: Path, ca: str = "ca.crt") -> grpc.Channel:
    creds = grpc.ssl_channel_credentials((pki / ca).read_bytes())
    return grpc.secure_channel(f"127.0.0.1:{port}", creds,
                               [("grpc.ssl_target_name_override", SERVER_NAME)])


def _one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = error_lines(result.stderr)
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    return lines[0]


def test_tls_and_token(tiny_data: Path, trained: Path, pki: Path, tmp_path: Path, procs):
    log = tmp_path / "eval.log"
    _, port = start_evaluator(procs, trained, tiny_data, tmp_path / "work", log,
                              "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
                              "--auth-token-file", str(pki / "token"), "--health-port", "0")
    health_port = int(re.search(r"health alone, plaintext, on port (\d+)", log.read_text()).group(1))
    tls = ["--ca", str(pki / "ca.crt"), "--tls-server-name", SERVER_NAME]

    # health stays open: no token needed (the image's HEALTHCHECK and Kubernetes probes)
    healthy = _metrics(port, "health", *tls)
    assert healthy.returncode == 0 and healthy.stdout.strip() == "SERVING", healthy.stderr
    # --health-port: what Kubernetes' gRPC probe (plaintext only) asks, as the manifests do; the
    # metrics are not there, and the main port takes no plaintext
    with grpc.insecure_channel(f"127.0.0.1:{health_port}") as plain:
        probe = health_pb2_grpc.HealthStub(plain).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert probe.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as absent:
            pb_grpc.MetricsServiceStub(plain).GetStatus(pb.GetStatusRequest(), timeout=5)
        assert absent.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with grpc.insecure_channel(f"127.0.0.1:{port}") as plain, pytest.raises(grpc.RpcError) as refused:
        health_pb2_grpc.HealthStub(plain).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    # TLS with the right CA and the right token → data: the evaluation of the trainer's checkpoint
    def latest():
        result = _metrics(port, "latest", "--json", *tls, "--auth-token-file", str(pki / "token"))
        return result if result.returncode == 0 else None

    result = wait_for(latest, 180, "an evaluation over TLS with the token", interval=1)
    assert '"global_step": "4"' in result.stdout and '"status": "STATUS_OK"' in result.stdout, result.stdout

    # no token → UNAUTHENTICATED, for unary calls and for the Watch stream
    with _tls_channel(port, pki) as channel:
        stub = pb_grpc.MetricsServiceStub(channel)
        for call in (lambda: stub.GetLatest(pb.GetLatestRequest(), timeout=5).evaluation,
                     lambda: list(stub.Watch(pb.WatchRequest(after_step=-1), timeout=5))):
            with pytest.raises(grpc.RpcError) as refused:
                call()
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "no bearer token" in refused.value.details()
        # wrong token → UNAUTHENTICATED too
        with pytest.raises(grpc.RpcError) as wrong:
            stub.GetStatus(pb.GetStatusRequest(), timeout=5,
                           metadata=[("authorization", "Bearer not-the-token")])
        assert wrong.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # a control on the same channel: the right token gets through
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=5,
                                metadata=[("authorization", "Bearer s3cret-token")]).status
        assert status.evaluations == 1
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    line = _one_error_line(_metrics(port, "latest", *tls))
    assert "refused the call: no bearer token" in line
    line = _one_error_line(_metrics(port, "latest", *tls, "--auth-token-file", str(pki / "wrong-token")))
    assert "the bearer token is not accepted" in line

    # a token added to the file is accepted without a restart (rotation)
    (pki / "token").write_text("s3cret-token\nnext-token\n")
    time.sleep(0.05)
    rotated = _metrics(port, "status", *tls, "--auth-token-file", str(pki / "wrong-token"))
    assert rotated.returncode == 1
    (pki / "wrong-token").write_text("next-token\n")
    rotated = _metrics(port, "status", *tls, "--auth-token-file", str(pki / "wrong-token"))
    assert rotated.returncode == 0, rotated.stderr

    # clean failures, each one line and quick: a plaintext client against the TLS port, the wrong
    # CA, and the right CA but a name the certificate was not issued to
    started = time.monotonic()
    line = _one_error_line(_metrics(port, "latest", "--auth-token-file", str(pki / "token")))
    assert line.startswith("showtell metrics: error: cannot reach an evaluator at 127.0.0.1:")
    assert "if it serves TLS, pass --ca" in line
    line = _one_error_line(_metrics(port, "latest", "--ca", str(pki / "other-ca.crt"), "--tls-server-name",
                                    SERVER_NAME, "--auth-token-file", str(pki / "token")))
    assert "a certificate --ca trusts" in line
    line = _one_error_line(_metrics(port, "health", "--ca", str(pki / "ca.crt")))
    assert "cannot reach an evaluator" in line
    assert time.monotonic() - started < 45
    with pytest.raises(grpc.RpcError) as plaintext, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE


def test_token_without_tls(tiny_data: Path, trained: Path, pki: Path, tmp_path: Path, procs):
    log = tmp_path / "eval.log"
    _, port = start_evaluator(procs, trained, tiny_data, tmp_path / "work", log,
                              "--auth-token-file", str(pki / "token"))
    assert "bearer token without TLS crosses the network in clear text" in log.read_text()
    line = _one_error_line(_metrics(port, "status"))
    assert "refused the call: no bearer token" in line
    ok = _metrics(port, "status", "--auth-token-file", str(pki / "token"))
    assert ok.returncode == 0 and "policy" in ok.stdout, ok.stderr


def test_bad_security_flags_are_one_line(tiny_data: Path, pki: Path, tmp_path: Path, showtell_main):
    common = ["evaluate", "--model-dir", str(tmp_path / "m"), "--data", str(tiny_data), "--port", "0"]
    half = showtell_main(*common, "--tls-cert", str(pki / "server.crt"))
    assert "--tls-cert and --tls-key go together" in _one_error_line(half)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    bad = showtell_main(*common, "--tls-cert", str(garbage), "--tls-key", str(pki / "server.key"))
    line = _one_error_line(bad)
    assert f"--tls-cert {garbage}: not a PEM certificate" in line
    missing = showtell_main(*common, "--auth-token-file", str(tmp_path / "nope"))
    assert f"--auth-token-file {tmp_path / 'nope'}: cannot read the token" in _one_error_line(missing)
    assert not (tmp_path / "m-eval").exists()  # nothing started, nothing written
    client = showtell_main("metrics", "latest", "--ca", str(garbage))
    assert f"--ca {garbage}: not a PEM CA certificate" in _one_error_line(client)
