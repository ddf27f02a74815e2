"""Shared fixtures: a tiny synthetic dataset and real ``showtell`` subprocesses.

Every process a test starts is registered with ``procs`` and stopped by its PID at
teardown, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from showtell.captioning.config import SyntheticConfig
from showtell.common import processes

free_ports = processes.free_ports  # tests import it from here

ROOT = Path(__file__).resolve().parents[1]
# Small decoder and batch so a CPU step takes milliseconds; 75 px is Inception's minimum.
# The encoder stays frozen (phase 1, on the feature cache the first run builds in the session's
# dataset): a step then traces and runs the decoder only.  Tests of the image path — the encoder
# training, towers, clusters, phases — say --train-inception true.
TINY_SIZES = ["--embedding-size", "32", "--lstm-units", "32", "--batch-size", "4", "--shuffle-buffer", "64",
              "--optimizer", "adam", "--learning-rate", "0.001"]
TINY_MODEL = [*TINY_SIZES, "--train-inception", "false"]
SERVING = re.compile(r"serving \S+ \(\+ health, reflection\) on 127\.0\.0\.1:(\d+)")
TINY_DATA = SyntheticConfig(train_images=40, val_images=8, image_size=75, seed=3, train_shards=4)


def run_showtell(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return processes.run(*args, timeout=timeout, cwd=ROOT)


@pytest.fixture
def showtell_main(capsys, caplog):
    """``showtell ARGS`` run in this process, as a ``CompletedProcess`` (exit code, stdout,
    stderr, and ``logs``: the INFO-and-above messages it logged, one per line): for outcomes
    decided inside the command, where no process boundary is under test — it saves a Python
    start-up and a TensorFlow import per call.  (Logging is set up once per process, so its
    lines reach ``stderr`` only sometimes; ``logs`` always has them.)"""
    import logging

    from showtell.cli import main

    def run(*argv: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        caplog.clear()
        with caplog.at_level(logging.INFO):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse's exits
                code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        result = subprocess.CompletedProcess(["showtell", *argv], code, captured.out, captured.err)
        result.logs = "\n".join(r.getMessage() for r in caplog.records)  # type: ignore[attr-defined]
        return result

    return run


def error_lines(stderr: str) -> list[str]:
    """stderr's lines (TensorFlow's native start-up notices are hidden: tests/test_native_logs.py)."""
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def java() -> str:
    """``java`` on the PATH (COCO's PTB tokenizer, METEOR), installed with apt-get when missing
    and root can (``tests/system_packages.py``); otherwise skipped — failed under CI,
    whose machines can install it (``system_packages.require``)."""
    import shutil

    from tests import system_packages

    reason = system_packages.unavailable(system_packages.JAVA)
    system_packages.require(reason and f"no Java: {reason}")
    system_packages.ensure(system_packages.JAVA)
    return shutil.which("java") or pytest.fail("java still not on the PATH after installing it")


@contextlib.contextmanager
def _shared(tmp_path_factory, name: str) -> Iterator[tuple[Path, bool]]:
    """A session fixture's directory shared by every xdist worker of this run: (path, already made).
    The first worker makes it under an exclusive lock while the others wait — a tiny model
    trained, a feature cache built once, not once per worker."""
    import fcntl

    root = tmp_path_factory.getbasetemp()
    if _xdist_worker():
        root = root.parent  # the run's directory, above each worker's own
    done = root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield root / name, done.exists()
        done.touch()


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """The synthetic dataset most tests read (never write: copy it first); its feature cache is
    built by the first trainer that needs it, for every worker."""
    from showtell.captioning.data import synthetic

    with _shared(tmp_path_factory, "data") as (base, made):
        if not made:
            synthetic.build(base / "synthetic", TINY_DATA)
    return base / "synthetic"


def renice_session(pid: int, nice: int) -> None:
    """Lower the priority of ``pid``'s session (it must lead one: ``Procs.start`` does) — for a
    process left running open-ended while the test waits on another, e.g. a trainer training on
    until its evaluator reports: what it does is the same, and the cycles it would have spent
    meanwhile go to the other tests' processes.  With autogrouping (Linux's
    default, ``/proc/sys/kernel/sched_autogroup_enabled``) each session is scheduled as one group,
    with equal weight to the pytest workers' whole group: a process's own ``nice`` then counts only
    within its session.  The group's nice is ``/proc/PID/autogroup``'s; ``nice`` also for kernels
    without it."""
    os.setpriority(os.PRIO_PROCESS, pid, nice)
    with contextlib.suppress(OSError):  # no autogrouping: the process's nice is what counts
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


class Procs:
    """The showtell processes a test starts, each in a session of its own; whatever happens to
    the test, each is killed with everything it started (a demo's children, an evaluator's JVM)."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []

    def start(self, *args: str, log: Path) -> subprocess.Popen:
        handle = open(log, "w")  # noqa: SIM115 - closed when the process is reaped
        proc = subprocess.Popen(processes.command(*args), stdout=handle, stderr=subprocess.STDOUT,
                                env=processes.environment(), cwd=ROOT, text=True, start_new_session=True)
        proc.log_handle = handle  # type: ignore[attr-defined]
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                processes.kill_tree(proc.pid)
                proc.wait(timeout=30)
            processes.kill_group(proc.pid)  # what it left in its group when it ended (a JVM)
            proc.log_handle.close()  # type: ignore[attr-defined]


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    try:
        yield p
    finally:
        p.stop_all()



def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def start_evaluator(procs: Procs, model_dir: Path | str, data: Path, work_dir: Path, log: Path,
                    *extra: str, port: int = 0) -> tuple[subprocess.Popen, int]:
    """A real evaluator service on 127.0.0.1; returns (process, port) once it serves.  ``port`` 0:
    the evaluator binds a free port itself and logs it (no port freed here and taken later)."""
    proc = procs.start("evaluate", "--model-dir", str(model_dir), "--data", str(data),
                       "--work-dir", str(work_dir), "--host", "127.0.0.1", "--port", str(port),
                       "--meteor", "false", *extra, log=log)

    def serving() -> int | None:
        if proc.poll() is not None:
            raise AssertionError(f"evaluator exited early:\n{log.read_text()[-3000:]}")
        found = SERVING.search(log.read_text())
        return int(found.group(1)) if found else None

    return proc, wait_for(serving, 120, "the evaluator to serve on 127.0.0.1")


@pytest.fixture(scope="session")
def tiny_model(tiny_data: Path, tmp_path_factory) -> Path:
    """A tiny trained model dir with ckpt-2 and ckpt-4; copy it (``copy_model``) before writing."""
    with _shared(tmp_path_factory, "tiny-model") as (base, made):
        if not made:
            train_more(tiny_data, base / "model", 4, "--save-every-steps", "2", "--keep", "10",
                       own_process=True)
    return base / "model"


def copy_model(model_dir: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(model_dir, to)
    return to


def train_more(data: Path, model_dir: Path, steps: int, *extra: str, own_process: bool = False) -> None:
    """Resume (or start) training ``model_dir`` up to ``steps`` with the tiny settings, in this
    process: the checkpoints it writes are what the test's evaluator processes see (its own logs
    are in the test's captured output).  ``own_process``: as a ``showtell`` process instead."""
    argv = ["train", "--data", str(data), "--model-dir", str(model_dir), *TINY_MODEL,
            "--steps", str(steps), "--save-every-secs", "0", *extra]
    if own_process:
        result = run_showtell(*argv)
        assert result.returncode == 0, result.stderr[-3000:]
        return
    from showtell.cli import main

    assert main(argv) == 0


def metrics_stub(port: int):
    import grpc

    from showtell.v1 import metrics_pb2_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return channel, metrics_pb2_grpc.MetricsStub(channel)


# ---------------------------------------------------------------- docker tests last, built early


def _xdist_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


def pytest_collection_modifyitems(config, items) -> None:
    """Docker tests last in one process (their images build in the background meanwhile, see
    below); under xdist the Docker module first, so its worker builds while the other worker
    runs the rest.  (Measured: putting every process-starting test first as well made the run
    slower — the heaviest tests then compete for the two cores; again at debad71 with three
    workers: 15:22 against 14:55, the tests' own CPU seconds 1515 against 1448.)  Stable order
    otherwise."""
    if _xdist_worker():
        items.sort(key=lambda item: "test_compose.py" not in item.nodeid)
    else:
        items.sort(key=lambda item: item.get_closest_marker("docker") is not None)


def pytest_runtest_setup(item) -> None:
    """A grouped test run outside its group fails: xdist marks a grouped test by a suffix on its
    node id, and a pytest that drops the suffix (9.2, pytest-xdist#1386) spreads a group over
    both workers without a word (two `apt-get`s at once, shared fixtures built twice)."""
    if _xdist_worker() and item.config.getoption("loadgroup", False) \
            and item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
        pytest.fail("--dist loadgroup ignored this test's xdist_group: this pytest breaks "
                    "pytest-xdist's groups (see the pin in pyproject.toml)", pytrace=False)


def pytest_collection_finish(session) -> None:
    """In one process: start the docker prebuild (niced dockerd, base image, both images) in the
    background when a docker test is selected and an engine can be had; the test waits for it.
    Under xdist each worker collects everything, so the docker test's own worker builds."""
    from tests import docker_engine

    wanted = any(item.get_closest_marker("docker") for item in session.items)
    if wanted and not _xdist_worker() and not session.config.option.collectonly \
            and docker_engine.unavailable() is None:
        docker_engine.prebuild(ROOT)


def pytest_sessionfinish(session, exitstatus) -> None:
    from tests import docker_engine

    docker_engine.stop_prebuild()  # dockerd stopped by its PID, even if the docker test never ran
