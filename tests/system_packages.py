"""Debian packages the tests need from the machine, installed with ``apt-get`` when missing.

One path for all of them (the Docker engine's tools, Java for COCO's PTB tokenizer and
METEOR), safe when several test processes ask at once: pytest-xdist workers, or a test and
the background Docker prebuild.  A ``threading.Lock`` does not reach across processes, and
dpkg refuses a second ``apt-get`` at once (exit 100, "Could not get lock"); so each install
holds an ``flock`` on :data:`LOCK_FILE`, and apt itself waits for dpkg's own lock
(``DPkg::Lock::Timeout``) in case something outside the tests holds it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

LOCK_FILE = Path(os.environ.get("SHOWTELL_APT_LOCK", "/tmp/showtell-apt.lock"))
LOCK_WAIT_S = 600  # dpkg's lock, held by someone else: wait this long before failing

DOCKER_TOOLS = {"dockerd": "docker.io", "docker-compose": "docker-compose", "debootstrap": "debootstrap"}
JAVA = {"java": "default-jre-headless"}


def under_ci() -> bool:
    """CI's machines are root with apt-get (``.ci/run`` sets ``SHOWTELL_REQUIRE_DOCKER=1``; most CI
    services set ``CI=true``): there a missing privilege or tool is a failure, never a skip."""
    return (os.environ.get("SHOWTELL_REQUIRE_DOCKER") == "1"
            or os.environ.get("CI", "").lower() in {"1", "true", "yes"})


def require(reason: str | None) -> None:
    """Skip the calling test because of ``reason`` (a missing privilege or tool) — or, under CI,
    fail it: a skip there would report a green run that never ran the test.  Nothing if None."""
    import pytest

    if reason is None:
        return
    if under_ci():
        pytest.fail(f"cannot run under CI, where it must: {reason}")
    pytest.skip(reason)


def root_with_apt() -> str | None:
    """Why this process cannot install Debian packages, or None."""
    if os.geteuid() != 0:
        return "installing Debian packages needs root"
    return None if shutil.which("apt-get") else "installing Debian packages needs apt-get"


def unavailable(tools: Mapping[str, str]) -> str | None:
    """Why ``tools`` (command → Debian package) cannot be had here, or None."""
    missing = [tool for tool in tools if not shutil.which(tool)]
    if not missing:
        return None
    if os.geteuid() != 0:
        return f"{', '.join(missing)} missing, and installing needs root"
    if not shutil.which("apt-get"):
        return f"{', '.join(missing)} missing and no apt-get to install them"
    return None


def ensure(tools: Mapping[str, str]) -> None:
    """Install the package of every tool in ``tools`` not on the PATH (nothing if all are)."""
    with _locked():  # looked up again under the lock: another process may just have installed them
        missing = sorted({pkg for tool, pkg in tools.items() if not shutil.which(tool)})
        if missing:
            _apt_install(missing)


def install(packages: list[str]) -> None:
    """``apt-get install`` ``packages`` under the lock, whether or not they are installed."""
    with _locked():
        _apt_install(packages)


class _locked:
    def __enter__(self) -> None:
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(LOCK_FILE, "a")
        fcntl.flock(self._handle, fcntl.LOCK_EX)

    def __exit__(self, *exc) -> None:
        fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()


def _apt_install(packages: list[str]) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    wait = ["-o", f"DPkg::Lock::Timeout={LOCK_WAIT_S}"]
    command = ["apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", *packages]
    if subprocess.run(command, env=env, capture_output=True, timeout=1800).returncode == 0:
        return
    # Package lists older than the mirror's files (a machine image's): refresh once and retry.
    _run(["apt-get", *wait, "update", "-q"], env)
    _run(command, env)


def _run(command: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}: {tail}")
