"""How showtell's gRPC travels beyond one host: optional TLS and a bearer token.

Server (``showtell evaluate``): ``--tls-cert/--tls-key`` make the port TLS-only;
``--auth-token-file`` makes every call carry ``authorization: Bearer <token>`` — except
``grpc.health.v1``, which stays open so Docker/Kubernetes probes and load balancers need no
secret.  The token file holds one token per line; any of them is accepted and the file is
re-read when it changes, so a token can be rotated without a restart (add the new one,
move the clients, remove the old one).

Client (``showtell metrics``, ``showtell train --evaluator``): ``--ca`` trusts a CA bundle (or
the server's self-signed certificate) and turns TLS on; ``--auth-token-file`` sends the
token.  Client flags default to ``SHOWTELL_*`` environment variables so a third machine (or
a container's health check) can be configured once.
"""

from __future__ import annotations

import argparse
import hmac
import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from showtell.common.errors import ShowtellError

log = logging.getLogger(__name__)

OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)


class TransportError(ShowtellError):
    """A certificate, key or token file that cannot be used."""


def _read(path: Path, flag: str, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TransportError(f"{flag} {path}: cannot read the {what} ({exc.strerror})") from exc
    if not data.strip():
        raise TransportError(f"{flag} {path}: the {what} file is empty")
    return data


def _read_pem(path: Path, flag: str, what: str, marker: bytes) -> bytes:
    data = _read(path, flag, what)
    if b"-----BEGIN " not in data or marker not in data:
        raise TransportError(f"{flag} {path}: not a PEM {what} "
                             f"(expected a '-----BEGIN …{marker.decode()}' block)")
    return data


def read_tokens(path: Path, flag: str) -> tuple[bytes, ...]:
    """The file's non-empty lines, stripped."""
    tokens = tuple(line.strip() for line in _read(path, flag, "token").splitlines() if line.strip())
    if not tokens:
        raise TransportError(f"{flag} {path}: no token in the file")
    return tokens


class TokenFile:
    """The accepted bearer tokens: the file's non-empty lines, re-read when its mtime changes."""

    def __init__(self, path: Path, flag: str = "--auth-token-file") -> None:
        self.path = path
        self.flag = flag
        self._lock = threading.Lock()
        self._mtime = self.path.stat().st_mtime_ns if path.exists() else None
        self._tokens = read_tokens(self.path, self.flag)

    def _refresh(self) -> None:
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return  # a file being replaced: keep the tokens we have
        if mtime == self._mtime:
            return
        try:
            tokens = read_tokens(self.path, self.flag)
        except TransportError as exc:
            log.warning("%s; keeping the previous tokens", exc)
            return
        self._tokens, self._mtime = tokens, mtime
        log.info("auth: re-read %d token(s) from %s", len(tokens), self.path)

    def accepts(self, token: str) -> bool:
        with self._lock:
            self._refresh()
            candidate = token.encode()
            # Compare against every token in constant time (no early exit on the first match).
            return any([hmac.compare_digest(candidate, t) for t in self._tokens])


def _refusal(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that ends the call UNAUTHENTICATED."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    kwargs = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, **kwargs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse, **kwargs)
    return grpc.unary_unary_rpc_method_handler(refuse, **kwargs)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Lets a call through when it carries an accepted ``authorization: Bearer`` token.
    The token itself is never logged."""

    def __init__(self, tokens: TokenFile) -> None:
        self.tokens = tokens

    async def intercept_service(self, continuation: Callable, handler_call_details: grpc.HandlerCallDetails):
        method = handler_call_details.method
        if method.startswith(OPEN_METHOD_PREFIXES):
            return await continuation(handler_call_details)
        header = dict(handler_call_details.invocation_metadata or ()).get("authorization", "")
        scheme, _, token = str(header).partition(" ")
        if scheme.lower() == "bearer" and token and self.tokens.accepts(token.strip()):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is None:  # unknown method: let gRPC answer UNIMPLEMENTED
            return None
        reason = "no bearer token" if not header else "the bearer token is not accepted"
        log.warning("refused %s: %s", method, reason)
        return _refusal(handler, f"{reason}; pass the evaluator's token (--auth-token-file)")


@dataclass(frozen=True)
class ServerSecurity:
    """What ``showtell evaluate`` was told about TLS and tokens (all optional)."""

    tls_cert: Path | None = None
    tls_key: Path | None = None
    auth_token_file: Path | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServerSecurity:
        return cls(args.tls_cert, args.tls_key, args.auth_token_file)

    @property
    def clear_text_token(self) -> bool:
        return bool(self.auth_token_file and not self.tls_cert)

    def credentials(self) -> grpc.ServerCredentials | None:
        if not self.tls_cert:
            return None
        cert = _read_pem(self.tls_cert, "--tls-cert", "certificate", b"CERTIFICATE")
        key = _read_pem(self.tls_key, "--tls-key", "private key", b"PRIVATE KEY")
        return grpc.ssl_server_credentials([(key, cert)])

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        if not self.auth_token_file:
            return []
        return [BearerTokenInterceptor(TokenFile(self.auth_token_file))]

    def describe(self) -> str:
        parts = ["TLS" if self.tls_cert else "plaintext"]
        parts.append("bearer token required (health open)" if self.auth_token_file else "no token")
        return ", ".join(parts)

    def load(self) -> LoadedSecurity:
        """Check the flags and read every file now, before the evaluator builds its model."""
        if bool(self.tls_cert) != bool(self.tls_key):
            raise TransportError("--tls-cert and --tls-key go together (see --help)")
        return LoadedSecurity(self, self.credentials(), self.interceptors())


@dataclass(frozen=True)
class LoadedSecurity:
    """``ServerSecurity`` with its files read: what the gRPC server is built with."""

    source: ServerSecurity = ServerSecurity()
    credentials: grpc.ServerCredentials | None = None
    interceptors: list[grpc.aio.ServerInterceptor] = field(default_factory=list)


def check_listen_address(host: str, port: int, flag: str = "--port") -> None:
    """Fail in one line, before TensorFlow loads, when ``host:port`` cannot be listened on
    (the server itself refuses to share a port: it binds without SO_REUSEPORT)."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise TransportError(f"--host {host}: cannot resolve it ({exc.strerror})") from exc
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise TransportError(f"--host {host} {flag} {port}: cannot listen there ({exc.strerror}); "
                                 f"is another evaluator using it? pick another {flag} (0: any free one)"
                                 ) from exc


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    g = p.add_argument_group("gRPC security (optional; health checks stay open)")
    g.add_argument("--tls-cert", type=Path, default=_path(env("SHOWTELL_TLS_CERT")),
                   help="PEM certificate (chain): serve TLS only (env SHOWTELL_TLS_CERT)")
    g.add_argument("--tls-key", type=Path, default=_path(env("SHOWTELL_TLS_KEY")),
                   help="PEM private key of --tls-cert (env SHOWTELL_TLS_KEY)")
    g.add_argument("--auth-token-file", type=Path, default=_path(env("SHOWTELL_AUTH_TOKEN_FILE")),
                   help="require 'authorization: Bearer <token>'; one accepted token per line, "
                        "re-read on change (env SHOWTELL_AUTH_TOKEN_FILE)")


# ---------------------------------------------------------------- client side


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` to every call (TLS or not)."""

    def __init__(self, token: str) -> None:
        self.header = ("authorization", f"Bearer {token}")

    def _with_token(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _Details(details.method, details.timeout, [*(details.metadata or ()), self.header],
                        details.credentials, details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._with_token(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._with_token(client_call_details), request)


class _Details(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression) -> None:
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = credentials, wait_for_ready, compression


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches an evaluator: ``ca`` set → TLS; ``auth_token_file`` set → token."""

    ca: Path | None = None
    auth_token_file: Path | None = None
    server_name: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, prefix: str = "") -> ClientSecurity:
        return cls(getattr(args, f"{prefix}ca"), getattr(args, f"{prefix}auth_token_file"),
                   getattr(args, f"{prefix}tls_server_name"))

    @property
    def tls(self) -> bool:
        return self.ca is not None

    def channel(self, target: str, options: list[tuple[str, object]] | None = None) -> grpc.Channel:
        """A channel to ``target``; reads the files now so a bad one fails before any call."""
        options = list(options or [])
        if self.ca is not None:
            roots = _read_pem(self.ca, "--ca", "CA certificate", b"CERTIFICATE")
            if self.server_name:
                options.append(("grpc.ssl_target_name_override", self.server_name))
            channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(roots), options)
        else:
            channel = grpc.insecure_channel(target, options)
        if self.auth_token_file is not None:
            token = read_tokens(self.auth_token_file, "--auth-token-file")[0].decode()
            channel = grpc.intercept_channel(channel, _BearerToken(token))
        return channel


def add_client_arguments(p: argparse.ArgumentParser, prefix: str = "", what: str = "the evaluator") -> None:
    """``--ca``, ``--auth-token-file``, ``--tls-server-name`` (``prefix`` e.g. ``evaluator-``)."""
    env = os.environ.get
    p.add_argument(f"--{prefix}ca", type=Path, default=_path(env("SHOWTELL_CA")),
                   help=f"PEM CA bundle (or self-signed cert) that signed {what}'s certificate: "
                        "connect with TLS (env SHOWTELL_CA)")
    p.add_argument(f"--{prefix}auth-token-file", type=Path, default=_path(env("SHOWTELL_AUTH_TOKEN_FILE")),
                   help=f"send the first token in this file to {what} (env SHOWTELL_AUTH_TOKEN_FILE)")
    p.add_argument(f"--{prefix}tls-server-name", default=env("SHOWTELL_TLS_SERVER_NAME") or None,
                   help="the name the certificate was issued to, when it differs from the host you dial "
                        "(env SHOWTELL_TLS_SERVER_NAME)")


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None
