"""Starting ``showtell`` subprocesses and reading what a process costs.

One home for what the demo, the tests and the benchmarks all do: run ``python -m showtell …``
with TensorFlow's C++ notices down and output unbuffered (so a log file follows live), and
read a process's CPU time, threads, open files and memory from ``/proc`` — how a waiting
service is checked for sleeping.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def signal_exit_code(signum: int) -> int:
    """The exit status of a run that a signal stopped before it finished: 128 + the signal (143
    for SIGTERM, 130 for SIGINT), as a shell reports a process the signal killed.  Schedulers read
    it as "not done": Kubernetes marks the pod Failed, not Succeeded (a preempted trainer is not
    finished), and Kubeflow's ``restartPolicy: ExitCode`` retries 128-255.  A service whose only end
    is a signal (an evaluator with no end of its own, a parameter server) exits 0 on it instead."""
    return 128 + int(signum)


def command(*args: str) -> list[str]:
    """``python -m showtell ARGS`` with this interpreter."""
    return [sys.executable, "-m", "showtell", *args]


def environment(**extra: str) -> dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **extra)


def run(*args: str, timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run a showtell command to its end, output captured as text."""
    return subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout,
                          env=kwargs.pop("env", environment()), **kwargs)


def start(args: list[str], log_path: Path, **kwargs) -> subprocess.Popen:
    """Start a showtell command in its own session, stdout and stderr appended to ``log_path``."""
    handle = open(log_path, "a")  # noqa: SIM115 - the child keeps its own copy
    try:
        return subprocess.Popen(command(*args), stdout=handle, stderr=subprocess.STDOUT,
                                env=kwargs.pop("env", environment()), start_new_session=True, **kwargs)
    finally:
        handle.close()


def free_ports(n: int = 1) -> list[int]:
    """Ports free on 127.0.0.1 right now (held together, so they differ): for local clusters."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def figures(pid: int) -> dict[str, float]:
    """Threads, open file descriptors and resident memory (MB) of a process."""
    pairs = (line.partition(":") for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    field = {key: value.split()[0] for key, _, value in pairs if value.split()}
    return {"threads": int(field["Threads"]), "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "rss_mb": round(int(field["VmRSS"]) / 1024, 1)}
