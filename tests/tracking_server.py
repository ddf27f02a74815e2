"""A real MLflow tracking server for the tests: ``mlflow server`` with a SQLite backend and proxied
artifacts, on 127.0.0.1, from a venv of its own (``deploy/tracking-server.txt``, made once per
checkout under ``build/``: the server is a test dependency, never the package's).  Stopped by its
process group (its PID's: the server and the uvicorn worker it starts), started again on the same
port and store to come back."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from showtell.common import processes
from tests.helpers import ROOT
from tests.measure import free_ports

REQUIREMENTS = ROOT / "deploy" / "tracking-server.txt"
VENV = ROOT / "build" / "tracking-server"


def server_program() -> Path:
    """``mlflow`` of the server's venv, made (``pip install --no-deps``: see the requirements file)
    when missing or older than its requirements; one maker at a time."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    stamp, program = VENV / ".installed", VENV / "bin" / "mlflow"
    with open(VENV.parent / "tracking-server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.stat().st_mtime < REQUIREMENTS.stat().st_mtime:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
            # --no-compile: the server's first start compiles what it imports, not all 70 packages
            made = subprocess.run([str(VENV / "bin" / "pip"), "install", "--quiet", "--no-deps",
                                   "--no-compile", "-r", str(REQUIREMENTS)], capture_output=True, text=True)
            assert made.returncode == 0, made.stderr[-3000:]
            stamp.touch()
    return program


class MlflowServer:
    """``mlflow server`` on 127.0.0.1:``port`` storing in ``root`` (its ``mlflow.db`` and artifacts)."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_ports()[0]
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 120) -> MlflowServer:
        self.root.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        log = open(self.root / f"server-{self.starts}.log", "w")  # noqa: SIM115 - closed by stop
        self.proc = subprocess.Popen(
            [str(server_program()), "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1",
             "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
             "--artifacts-destination", str(self.root / "artifacts")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=processes.environment(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"))
        self.proc.log_handle = log  # type: ignore[attr-defined]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = (self.root / f"server-{self.starts}.log").read_text()
                raise AssertionError(f"mlflow server exited: {text[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"mlflow server not healthy on {self.uri} after {timeout:.0f} s")

    def stop(self) -> None:
        """Down at once (SIGKILL to its group: what a crash or a lost host looks like to clients)."""
        if self.proc is not None:
            processes.kill_tree(self.proc.pid)
            self.proc.wait(timeout=30)
            processes.kill_group(self.proc.pid)
            self.proc.log_handle.close()  # type: ignore[attr-defined]
            self.proc = None

    def client(self):
        from mlflow import MlflowClient

        return MlflowClient(self.uri)


def exactly_once(server: MlflowServer, records: list) -> dict[str, int]:
    """Ok history records (of the default set) against MLflow, each in the MLflow run tagged with
    its showtell run: how many of their (key, step) points MLflow lacks, how many it holds more than
    once, and how many showtell runs have more than one MLflow run."""
    client = server.client()
    experiment = client.get_experiment_by_name("showtell").experiment_id
    expected: dict[tuple[str, str], set[int]] = {}
    for record in records:
        for name in record.metrics:
            bounds = [f"val/{name}.lo", f"val/{name}.hi"] if name in record.intervals else []
            for key in (f"val/{name}", *bounds):
                expected.setdefault((record.run, key), set()).add(record.step)
    missing = twice = runs_twice = 0
    runs: dict[str, str | None] = {}
    for run in sorted({run for run, _ in expected}):
        found = client.search_runs([experiment], filter_string=f"tags.`showtell.run_id` = '{run}'")
        runs_twice += len(found) > 1
        runs[run] = found[0].info.run_id if found else None
    for (run, key), steps in sorted(expected.items()):
        held = [m.step for m in client.get_metric_history(runs[run], key)] if runs[run] else []
        missing += len(steps - set(held))
        twice += len(held) - len(set(held))
    return {"points_missing": missing, "points_twice": twice, "runs_twice": runs_twice}
