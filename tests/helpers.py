"""What the tests share besides fixtures: the tiny model's settings, and real ``showtell``
processes — started in sessions of their own (``Procs``), waited for, and talked to over gRPC."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import time
from pathlib import Path

from showtell.captioning.config import SyntheticConfig
from showtell.common import processes

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


def error_lines(stderr: str) -> list[str]:
    """stderr's lines (TensorFlow's native start-up notices are hidden: tests/test_native_logs.py)."""
    return [line for line in stderr.splitlines() if line.strip()]


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

    def start_program(self, *argv: str, log: Path) -> subprocess.Popen:
        """Another program the test talks to (a Prometheus server), stopped the same way."""
        handle = open(log, "w")  # noqa: SIM115 - closed when the process is reaped
        proc = subprocess.Popen(list(argv), stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT, text=True,
                                start_new_session=True)
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
    return channel, metrics_pb2_grpc.MetricsServiceStub(channel)


def learning_rate(checkpoint: Path, optimizer: str = "optimizer") -> float:
    """The learning rate a checkpoint holds for ``optimizer``."""
    import tensorflow as tf

    name = f"{optimizer}/_learning_rate/.ATTRIBUTES/VARIABLE_VALUE"
    return float(tf.train.load_variable(str(checkpoint), name))


def xdist_worker() -> bool:
    """This process is a pytest-xdist worker."""
    return "PYTEST_XDIST_WORKER" in os.environ


K8S_VERSION = "1.37"  # the Kubernetes API schemas the manifests are checked against


def parse_cli(module: str, argv: list[str]) -> argparse.Namespace:
    """Parse with the real CLI's parser, a ``--config FILE`` applied as the CLI does; argparse
    exits on an unknown or malformed flag."""
    import importlib

    from showtell.common.setting_sources import parse_args

    cli = importlib.import_module(module)
    parser = argparse.ArgumentParser(exit_on_error=False)
    cli.add_arguments(parser)
    return parse_args(parser, argv)


def printed_settings(text: str) -> dict:
    """``showtell train --print-config``'s YAML, or a run's record ``.yaml``, by section:
    ``settings`` by flag dest (a section's dotted keys, or a flat flag name, as a config file may
    hold them) and the other sections (``resolved``, ``environment``) as they are."""
    import yaml

    from showtell.common.setting_sources import RECORD_SECTIONS
    from showtell.trainer.experiment import keys

    dests = keys()
    out: dict = {"settings": {}}
    for name, value in (yaml.safe_load(text) or {}).items():
        if name in RECORD_SECTIONS:
            out[name] = value
        elif isinstance(value, dict):
            out["settings"].update({dests[f"{name}.{field}"]: inner for field, inner in value.items()})
        else:
            out["settings"][name.replace("-", "_")] = value
    return out
