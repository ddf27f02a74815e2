"""What a test or a benchmark reads of the processes it started: free loopback ports for local
clusters, and a process's CPU time, threads, open files and memory from ``/proc`` — how a waiting
service is checked for sleeping.  Not product code: nothing under ``showtell`` needs it."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from showtell.common.processes import descendants


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


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and of every process it started that is still running (a JVM the
    evaluator's scorer keeps: its cost is the evaluator's)."""
    total = cpu_seconds(pid)
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(child)
    return total


def figures(pid: int) -> dict[str, float]:
    """Threads, open file descriptors and resident memory (MB) of a process."""
    pairs = (line.partition(":") for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    field = {key: value.split()[0] for key, _, value in pairs if value.split()}
    return {"threads": int(field["Threads"]), "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "rss_mb": round(int(field["VmRSS"]) / 1024, 1)}
