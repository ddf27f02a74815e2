"""Throw-away TLS material for tests, made with the ``openssl`` command.

A test CA signs a server certificate issued to ``SERVER_NAME`` only (so dialing 127.0.0.1 needs
``--tls-server-name``); a second, unrelated CA plays the wrong one; two token files.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SERVER_NAME = "evaluator"
TOKEN = "s3cret-token"
EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d: Path) -> Path:
    """``ca.crt``, ``other-ca.crt``, ``server.crt``/``server.key`` (signed by ``ca``), ``token``,
    ``wrong-token`` in ``d``; every file world-readable, as a container's non-root user needs."""
    d.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", *EC, "-keyout", f"{ca}.key", "-out", f"{ca}.crt", "-days", "2",
                 "-subj", f"/CN={ca}", cwd=d)
    _openssl("req", *EC, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={SERVER_NAME}", cwd=d)
    (d / "san.ext").write_text(f"subjectAltName=DNS:{SERVER_NAME}\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "san.ext", cwd=d)
    (d / "token").write_text(TOKEN + "\n")
    (d / "wrong-token").write_text("not-the-token\n")
    for path in d.iterdir():
        path.chmod(0o644)
    return d
