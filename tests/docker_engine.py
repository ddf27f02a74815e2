"""A private Docker engine for the tests, started the way ``../shared/FIELD-NOTES.md`` says.

No engine runs on these machines until a test starts one: ``apt-get`` installs Debian's
``docker.io``, ``docker-compose`` (v1.29) and ``debootstrap`` when missing
(``tests/system_packages.py``: safe when two test processes ask at once); ``dockerd`` runs
with its data and exec roots under a temp dir and flags that leave the host's networking
alone (no iptables, no bridge, no ip_forward), on its own socket; it is stopped by its PID
(and its mounts released) whatever happens.  No registry is reachable, so the base image is
a Debian bookworm root filesystem made by ``debootstrap`` — cached as a tarball in
``CACHE_DIR`` between runs — and ``docker import``-ed.
"""

from __future__ import annotations

import concurrent.futures
import http.server
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests import system_packages
from tests.measure import cpu_seconds

CACHE_DIR = Path(os.environ.get("SHOWTELL_DOCKER_CACHE", "/var/cache/showtell-docker"))
BASE_IMAGE = "showtell-base:bookworm"
# Where dockerd (cgroupfs driver, cgroup v1 as on these machines) accounts its containers' CPU.
CONTAINERS_CPUACCT = Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage")
# What the Dockerfiles need from a base: python3 (3.11 in bookworm), venv (whose ensurepip puts
# pip into /opt/venv: Debian's python3-pip, with its dependencies, would go unused), CA handling.
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
BASE_TARBALL = CACHE_DIR / f"bookworm-minbase-{BASE_PACKAGES.replace(',', '+')}.tar"


def unavailable() -> str | None:
    """Why no engine can be had here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root to install and start dockerd"
    return system_packages.unavailable(system_packages.DOCKER_TOOLS)


def ensure_tools() -> None:
    """Install what is missing with apt-get (once; ≈10 s), whoever else is installing."""
    system_packages.ensure(system_packages.DOCKER_TOOLS)


class Engine:
    """One ``dockerd`` under ``root``; ``client`` is a docker SDK client on its socket."""

    def __init__(self, root: Path, nice: int = 0) -> None:
        self.root = root
        self.nice = nice
        self.socket = root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.log_path = root / "dockerd.log"
        self.proc: subprocess.Popen | None = None
        self.client = None
        self._containers_cpu_at_start = 0

    def start(self, timeout: float = 60) -> Engine:
        import docker

        self.root.mkdir(parents=True, exist_ok=True)
        # the cgroup outlives every engine: its count goes on from one engine to the next
        self._containers_cpu_at_start = _containers_cpu_ns()
        with open(self.log_path, "w") as log_file:
            self.proc = subprocess.Popen(
                ["nice", "-n", str(self.nice),  # children (containerd, containers) inherit it
                 "dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none", "--ip-forward=false",
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

    def cpu_seconds(self) -> float | None:
        """The engine's CPU since it started, which no test process waits for: dockerd's and
        containerd's own, and every container's, the builds' steps included — from the cgroup
        dockerd puts them under (cgroup v1's cpuacct keeps a removed container's usage in its
        parent, and the cgroup outlives the engine: counted from the engine's start).  None when
        that cgroup is not where this machine's layout puts it."""

        containers = _containers_cpu_ns()
        if self.proc is None or self.proc.poll() is not None or containers is None:
            return None
        engine = cpu_seconds(self.proc.pid)
        for child in Path(f"/proc/{self.proc.pid}/task").glob("*/children"):
            for pid in child.read_text().split():
                if Path(f"/proc/{pid}/comm").read_text().strip() == "containerd":
                    engine += cpu_seconds(int(pid))
        return engine + (containers - (self._containers_cpu_at_start or 0)) / 1e9

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


def _containers_cpu_ns() -> int | None:
    """Every container's CPU nanoseconds so far, as the cgroup dockerd makes them in counts them
    (0 before any engine made it; None on a machine whose cgroups are laid out otherwise)."""
    if not CONTAINERS_CPUACCT.parent.parent.is_dir():
        return None
    return int(CONTAINERS_CPUACCT.read_text()) if CONTAINERS_CPUACCT.is_file() else 0


def build_base_tarball(out: Path) -> None:
    """``debootstrap --variant=minbase bookworm`` into a temp dir, tarred, renamed into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        rootfs = Path(tmp) / "rootfs"
        # In a session of its own, not niced: the Docker test's chain (base, builds, stack) is the
        # suite's longest, so it must not wait for the others.  Niced inside the workers' session
        # (autogrouping: one scheduling group), it took 308 s for ≈ 24 s of work on a busy machine.
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}",
                        "bookworm", str(rootfs), "http://deb.debian.org/debian"],
                       check=True, capture_output=True, timeout=1200, start_new_session=True)
        partial = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True,
                       capture_output=True, timeout=600, start_new_session=True)
        os.replace(partial, out)


def project_copy(root: Path, dest: Path) -> Path:
    """The checkout's files (tracked + untracked, not ignored) plus the host's extra CA
    certificates for builds behind a TLS-intercepting proxy (deploy/certs/, never committed)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = root / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    for crt in Path("/usr/local/share/ca-certificates").glob("*.crt"):
        shutil.copy2(crt, dest / "deploy" / "certs" / crt.name)
    return dest


def wheelhouse(root: Path, out: Path, extra: str = "cpu") -> int:
    """The images' dependencies as wheels in ``out``, fetched by the suite's own pip at the pins
    ``make install`` used (on these machines mostly from their local package index; the rest from
    PyPI), so the two image builds fetch nothing themselves: they install from ``out`` with no
    index (``WheelServer``).  Number of wheels."""
    import sys

    out.mkdir(parents=True, exist_ok=True)
    requirements = subprocess.run(["sh", "deploy/install.sh", "requirements", extra], cwd=root, check=True,
                                  capture_output=True, text=True, timeout=60).stdout
    listed = out / "requirements.txt"
    listed.write_text(requirements)
    result = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:",
                             "--dest", str(out), "-c", str(root / "constraints.txt"), "-r", str(listed)],
                            capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"pip download of the images' wheels failed: {result.stderr[-2000:]}")
    return len(list(out.glob("*.whl")))


class WheelServer:
    """``out`` over HTTP on 127.0.0.1 (a thread of this process): pip's ``--find-links`` reads the
    directory listing.  The builds run on the host's network, so they reach it."""

    def __init__(self, directory: Path) -> None:
        import functools

        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, name="wheel-server", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=30)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # one line per wheel on the test's stderr: not wanted
        pass


# Build args every test stack passes (the wheelhouse's address once the prebuild serves it): the
# same for each build of a session, so each build after the first hits the first's cache.
BUILD_ARGS: dict[str, str] = {}


class Stack:
    """``docker-compose -p NAME --env-file F -f …`` aimed at the private engine."""

    def __init__(self, engine, cwd: Path, name: str, env: dict[str, str], files: list[str]) -> None:
        self.engine, self.cwd, self.name = engine, cwd, name
        self.files = [*files, str(self._host_network_builds(files))]
        self.env_file = cwd / f"{name}.env"
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))

    def _host_network_builds(self, files: list[str]) -> Path:
        """An override building on the host's network, with ``BUILD_ARGS``.  This engine runs
        without a bridge (``--bridge=none``: the host's networking is left alone), so its builds
        reach the package registries (and the wheelhouse on 127.0.0.1) only that way; an engine
        with a bridge (every user's) needs nothing of the kind, and the compose files ask for none
        (BuildKit refuses it unless entitled)."""
        import yaml

        built = set()
        for f in files:
            services = yaml.safe_load((self.cwd / f).read_text()).get("services") or {}
            built |= {name for name, service in services.items() if "build" in service}
        override = self.cwd / f"{self.name}.host-network-builds.yml"
        network = {"build": {"network": "host", **({"args": dict(BUILD_ARGS)} if BUILD_ARGS else {})}}
        override.write_text(yaml.safe_dump({"services": {name: network for name in sorted(built)}}))
        return override

    def run(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
        cmd = ["docker-compose", "-p", self.name, "--env-file", str(self.env_file)]
        for f in self.files:
            cmd += ["-f", f]
        env = {k: v for k, v in self.engine.env().items() if not k.startswith("SHOWTELL_")}
        result = subprocess.run([*cmd, *args], cwd=self.cwd, env=env, capture_output=True, text=True,
                                timeout=timeout)
        if check:
            assert result.returncode == 0, \
                f"docker-compose {' '.join(args)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        return result

    def container(self, service: str):
        labels = [f"com.docker.compose.project={self.name}", f"com.docker.compose.service={service}"]
        found = self.engine.client.containers.list(all=True, filters={"label": labels})
        assert len(found) == 1, f"{service}: {len(found)} containers"
        return found[0]

    def health(self, service: str) -> str:
        container = self.container(service)
        return container.attrs["State"].get("Health", {}).get("Status", "none")

    def logs(self, service: str) -> str:
        return self.container(service).logs().decode(errors="replace")


# ---------------------------------------------------------------- background build

PROJECT = "showtell-test"
BUILD_ENV = {
    "SHOWTELL_VERSION": "test",
    "SHOWTELL_BASE_IMAGE": BASE_IMAGE,  # built here: no registry
}


@dataclass
class Prebuilt:
    engine: Engine
    project: Path
    figures: dict[str, float] = field(default_factory=dict)
    builds: dict[str, str] = field(default_factory=dict)  # each service's build output


class Prebuild:
    """The wheelhouse, engine start, base image and both image builds in a thread; dockerd runs
    under ``nice 19``, and its children (build and stack containers) inherit it.  With Linux's
    autogrouping (on here) a nice value orders processes only within their session: dockerd's
    session, and debootstrap's, are each one group, weighed like any other (not lowered: this
    chain is the suite's longest, and the stack's timed waits would hang on the load).
    ``wait()`` returns the result or raises what went wrong."""

    def __init__(self, root: Path, use_wheelhouse: bool = True) -> None:
        self.root = root
        self.use_wheelhouse = use_wheelhouse  # False: the builds fetch from PyPI, as a user's `up` does
        self.scratch = Path(tempfile.mkdtemp(prefix="stprj-", dir="/tmp"))
        # A short root: containerd's unix sockets live under the exec root (108-byte path limit).
        self.engine = Engine(Path(tempfile.mkdtemp(prefix="stdk-", dir="/tmp")), nice=19)
        self.result: Prebuilt | None = None
        self.error: BaseException | None = None
        self.wheels: WheelServer | None = None
        self.thread = threading.Thread(target=self._run, name="docker-prebuild", daemon=True)

    def start(self) -> Prebuild:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            figures: dict[str, float] = {}
            # The wheelhouse (network-bound) meanwhile: apt, dockerd and debootstrap don't need it.
            wheels = self.scratch / "wheels"
            with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="wheelhouse") as pool:
                fetch = pool.submit(_timed, wheelhouse, self.root, wheels) if self.use_wheelhouse else None
                ensure_tools()
                self.engine.start()
                figures["debootstrap_s"] = round(self.engine.import_base_image(), 1)  # 0: cached
                if fetch is not None:
                    figures["wheels"], figures["wheelhouse_s"] = fetch.result()
            if fetch is not None:
                self.wheels = WheelServer(wheels)
                BUILD_ARGS.update(PIP_FIND_LINKS=self.wheels.url, PIP_NO_INDEX="1")
            project = project_copy(self.root, self.scratch / "project")
            stack = Stack(self.engine, project, PROJECT, BUILD_ENV, ["docker-compose.yml"])
            builds = {}
            for service in ("trainer", "evaluator"):  # the evaluator's shared stages: the trainer's
                started = time.monotonic()
                built = stack.run("build", service)
                builds[service] = built.stdout + built.stderr
                figures[f"{service}_build_s"] = round(time.monotonic() - started, 1)
            self.result = Prebuilt(self.engine, project, figures, builds)
        except BaseException as exc:  # handed to wait()
            self.error = exc

    def wait(self, timeout: float = 2400) -> Prebuilt:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError(f"the docker prebuild did not finish in {timeout:.0f} s")
        if self.error is not None:
            raise RuntimeError(f"docker prebuild failed: {self.error}") from self.error
        assert self.result is not None
        return self.result

    def stop(self) -> None:
        """Stop dockerd by PID (a build in progress then fails and the thread ends)."""
        self.engine.stop()
        self.thread.join(timeout=120)
        if self.wheels is not None:
            self.wheels.stop()
            BUILD_ARGS.clear()
        shutil.rmtree(self.scratch, ignore_errors=True)


_current: Prebuild | None = None


def _timed(work, *args):
    """``work(*args)`` and the seconds it took."""
    started = time.monotonic()
    return work(*args), round(time.monotonic() - started, 1)


def prebuild(root: Path, use_wheelhouse: bool = True) -> Prebuild:
    """The running prebuild, or a new one started now."""
    global _current
    if _current is None:
        _current = Prebuild(root, use_wheelhouse).start()
    return _current


def stop_prebuild() -> None:
    global _current
    if _current is not None:
        _current.stop()
        _current = None
