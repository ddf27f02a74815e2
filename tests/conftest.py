"""Fixtures only: a tiny synthetic dataset and model made once for every worker, Java, the
in-process CLI, and ``procs`` — every process a test starts, stopped by its PID at teardown,
whatever happened.  Helpers live in ``tests/helpers.py``, fakes in ``tests/fakes.py``, the session
hooks in ``tests/session_hooks.py``."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import TINY_DATA, Procs, train_more, xdist_worker


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
    if xdist_worker():
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


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    try:
        yield p
    finally:
        p.stop_all()



@pytest.fixture(scope="session")
def tiny_model(tiny_data: Path, tmp_path_factory) -> Path:
    """A tiny trained model dir with ckpt-2 and ckpt-4; copy it (``copy_model``) before writing."""
    with _shared(tmp_path_factory, "tiny-model") as (base, made):
        if not made:
            train_more(tiny_data, base / "model", 4, "--save-every-steps", "2", "--keep", "10",
                       own_process=True)
    return base / "model"


