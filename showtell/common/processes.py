"""Starting ``showtell`` subprocesses and reading what a process costs.

One home for what the demo, the tests and the benchmarks all do: run ``python -m showtell …``
with TensorFlow's C++ notices down and output unbuffered (so a log file follows live), leave
nothing running after a run that timed out or failed (``kill_tree``), and read a process's CPU
time, threads, open files and memory from ``/proc`` — how a waiting service is checked for
sleeping.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

_KEPT: list[object] = []
_EXITING = {"fast": False}


def run_as_process(main: Callable[[], int]) -> NoReturn:
    """A command's process: ``main``, then the exit without the interpreter's teardown — every
    file is written and closed by then, and what ``keep_until_exit`` holds is never destroyed."""
    _EXITING["fast"] = True
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def keep_until_exit(thing: object) -> None:
    """Hold ``thing`` until the process ends, in a process started by ``run_as_process`` (in one
    that runs commands in process, a test, nothing is held).  For a ``tf.data`` iterator: its
    destructor waits for the input pipeline's autotuning thread to end its optimization pass —
    measured at the end of a phase-1 trainer beside a busy CPU: 0.01 to 22 s (py-spy: the main
    thread in ``RootDataset::Iterator::~Iterator``, waiting on that thread)."""
    if _EXITING["fast"]:
        _KEPT.append(thing)


def signal_exit_code(signum: int) -> int:
    """The exit status of a run that a signal stopped before it finished: 128 + the signal (143
    for SIGTERM, 130 for SIGINT), as a shell reports a process the signal killed.  Schedulers read
    it as "not done": Kubernetes marks the pod Failed, not Succeeded (a preempted trainer is not
    finished), and Kubeflow's ``restartPolicy: ExitCode`` retries every code from 128 (training
    operator v1.9.3's ``train.IsRetryableExitCode``: ``exitCode >= 128``; 138 is the program's own
    "retry me"), failing the job on any lower one.  A service whose only end
    is a signal (an evaluator with no end of its own, a parameter server) exits 0 on it instead."""
    return 128 + int(signum)


def command(*args: str) -> list[str]:
    """``python -m showtell ARGS`` with this interpreter."""
    return [sys.executable, "-m", "showtell", *args]


def environment(**extra: str) -> dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **extra)


def run(*args: str, timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run a showtell command to its end, output captured as text.  On a timeout (or any error
    while waiting) the command and everything it started are killed (``kill_tree``) before the
    error is raised: a demo's children would otherwise run on."""
    return run_process(command(*args), timeout=timeout, env=kwargs.pop("env", environment()), **kwargs)


def run_process(args: list[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` with output captured as text, in a session of its own, whose whole tree
    is killed if it does not end by itself (``subprocess.run`` kills only the direct child)."""
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, **kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except BaseException:
            kill_tree(proc.pid)
            proc.wait()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def start(args: list[str], log_path: Path, **kwargs) -> subprocess.Popen:
    """Start a showtell command in its own session (so a terminal's Ctrl-C reaches only whoever
    started it, which stops it in order), stdout and stderr appended to ``log_path``.  It leads
    its own process group: ``kill_group`` ends it with anything it started there (a JVM)."""
    handle = open(log_path, "a")  # noqa: SIM115 - the child keeps its own copy
    try:
        return subprocess.Popen(command(*args), stdout=handle, stderr=subprocess.STDOUT,
                                env=kwargs.pop("env", environment()), start_new_session=True, **kwargs)
    finally:
        handle.close()


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs, as ``/proc`` shows them now (parents first)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            children.setdefault(parent, []).append(int(entry))
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue += children.get(child, [])
    return found


def kill_group(pgid: int) -> None:
    """SIGKILL a process group, if it is still there and not the caller's own."""
    if pgid > 1 and pgid != os.getpgrp():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def kill_tree(pid: int) -> None:
    """SIGKILL a process, every process it started (found while they are still its descendants,
    whatever session each made for itself) and every process group among them — so a run that
    timed out, or a harness that failed, leaves nothing running.  The caller reaps ``pid``."""
    tree = [pid, *descendants(pid)]
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            kill_group(os.getpgid(member))
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)


def stop(proc: subprocess.Popen, grace: float = 60.0) -> int:
    """SIGTERM a process started by ``start``; after ``grace`` seconds SIGKILL it and everything
    it started (``kill_tree``); then its process group, for what it left there (a JVM).  Its
    exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
    code = proc.wait()
    kill_group(proc.pid)
    return code
