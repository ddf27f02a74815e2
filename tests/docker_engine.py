"""A private Docker engine for the tests, started the way ``../shared/FIELD-NOTES.md`` says.

No engine runs on these machines until a test starts one: ``apt-get`` installs Debian's
``docker.io``, ``docker-compose`` (v1.29) and ``debootstrap`` when missing; ``dockerd`` runs
with its data and exec roots under a temp dir and flags that leave the host's networking
alone (no iptables, no bridge, no ip_forward), on its own socket; it is stopped by its PID
(and its mounts released) whatever happens.  No registry is reachable, so the base image is
a Debian bookworm root filesystem made by ``debootstrap`` — cached as a tarball in
``CACHE_DIR`` between runs — and ``docker import``-ed.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_DIR = Path(os.environ.get("SHOWTELL_DOCKER_CACHE", "/var/cache/showtell-docker"))
BASE_IMAGE = "showtell-base:bookworm"
# What the Dockerfiles need from a base: python3 (3.11 in bookworm), venv, pip, CA handling.
BASE_PACKAGES = "python3,python3-venv,python3-pip,ca-certificates"
BASE_TARBALL = CACHE_DIR / f"bookworm-minbase-{BASE_PACKAGES.replace(',', '+')}.tar"
APT_PACKAGES = {"dockerd": "docker.io", "docker-compose": "docker-compose", "debootstrap": "debootstrap"}


def unavailable() -> str | None:
    """Why no engine can be had here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root to install and start dockerd"
    missing = [tool for tool in APT_PACKAGES if not shutil.which(tool)]
    if missing and not shutil.which("apt-get"):
        return f"{', '.join(missing)} missing and no apt-get to install them"
    return None


def ensure_tools() -> None:
    """Install what is missing with apt-get (once; ≈10 s)."""
    missing = sorted({pkg for tool, pkg in APT_PACKAGES.items() if not shutil.which(tool)})
    if not missing:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    if subprocess.run(install, env=env, capture_output=True, timeout=900).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True, capture_output=True, timeout=900)
        subprocess.run(install, env=env, check=True, capture_output=True, timeout=900)


class Engine:
    """One ``dockerd`` under ``root``; ``client`` is a docker SDK client on its socket."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.log_path = root / "dockerd.log"
        self.proc: subprocess.Popen | None = None
        self.client = None

    def start(self, timeout: float = 60) -> Engine:
        import docker

        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w") as log_file:
            self.proc = subprocess.Popen(
                ["dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none", "--ip-forward=false",
                 "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
                 "--pidfile", str(self.root / "dockerd.pid"), "-H", self.host],
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text()[-2000:]
                raise RuntimeError(f"dockerd exited {self.proc.returncode}:\n{tail}")
            try:
                client = docker.DockerClient(base_url=self.host, timeout=600)
                client.ping()
                self.client = client
                return self
            except Exception:
                time.sleep(0.5)
        raise RuntimeError(f"dockerd not ready in {timeout:.0f} s:\n{self.log_path.read_text()[-2000:]}")

    def env(self) -> dict[str, str]:
        """Environment for ``docker``/``docker-compose`` commands aimed at this engine."""
        return dict(os.environ, DOCKER_HOST=self.host)

    def stop(self) -> None:
        """SIGTERM by PID (dockerd stops its containers and containerd), SIGKILL after 60 s."""
        if self.client is not None:
            self.client.close()
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: dockerd and containerd
                self.proc.wait(timeout=30)
        self._release_mounts()
        shutil.rmtree(self.root, ignore_errors=True)

    def _release_mounts(self) -> None:
        """Mounts dockerd can leave behind under its roots (netns, overlay) block the cleanup."""
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for point in sorted((m for m in mounts if m.startswith(str(self.root))), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)

    def import_base_image(self) -> float:
        """Make ``BASE_IMAGE`` from the cached rootfs tarball (built first if absent); seconds spent
        on debootstrap (0 when cached)."""
        spent = 0.0
        if not BASE_TARBALL.is_file():
            started = time.monotonic()
            build_base_tarball(BASE_TARBALL)
            spent = time.monotonic() - started
        subprocess.run(["docker", "import", str(BASE_TARBALL), BASE_IMAGE], env=self.env(), check=True,
                       capture_output=True, timeout=600)
        return spent


def build_base_tarball(out: Path) -> None:
    """``debootstrap --variant=minbase bookworm`` into a temp dir, tarred, renamed into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        rootfs = Path(tmp) / "rootfs"
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm",
                        str(rootfs), "http://deb.debian.org/debian"],
                       check=True, capture_output=True, timeout=1200)
        partial = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True, capture_output=True,
                       timeout=600)
        os.replace(partial, out)
