"""The suite's session hooks (registered with ``-p tests.session_hooks`` in pyproject.toml): the
order tests run in, a guard on xdist's groups, the Docker prebuild started early and stopped at
the end, and the run's figure: its ten slowest tests and its wall time."""

from __future__ import annotations

import json
import time

import pytest

from tests.helpers import ROOT, xdist_worker

MEASURED = ROOT / "runs" / "test-durations.json"  # each test's seconds in this run, written at the end


def _test_id(nodeid: str) -> str:
    """A node id without xdist's ``@group`` suffix."""
    return nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


def pytest_collection_modifyitems(config, items) -> None:
    """Docker tests last in one process (their images build in the background meanwhile, see
    below); under xdist the Docker module first, so its worker builds while the others run the
    rest, in collection order, which spreads the heavy tests over the run.  Measured: longest
    first (by a durations file) made the run slower — 30:45 of tests against 27:34, the tests'
    own seconds 5440 against 4835 (2026-11-27, 2 cores): the heaviest tests then run at once
    (likely their TensorFlow thread pools oversubscribing two cores; not profiled), and so in
    debad71 with every process-starting test first: 15:22 against 14:55."""
    if xdist_worker():
        items.sort(key=lambda item: "test_compose.py" not in item.nodeid)
    else:
        items.sort(key=lambda item: item.get_closest_marker("docker") is not None)


_run: dict[str, float] = {}
_started = time.monotonic()


def pytest_sessionstart(session) -> None:
    global _started
    _started = time.monotonic()


def pytest_runtest_logreport(report) -> None:
    """Each test's seconds, as the controller (or the single process) hears of them."""
    if not xdist_worker():
        _run[_test_id(report.nodeid)] = _run.get(_test_id(report.nodeid), 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    """The run's figure: its wall time and its ten slowest tests (``runs/test-durations.json``: all)."""
    if xdist_worker() or not _run:
        return
    wall = time.monotonic() - _started
    slowest = sorted(_run.items(), key=lambda kv: -kv[1])[:10]
    terminalreporter.section("the suite's time")
    terminalreporter.write_line(f"{len(_run)} tests in {wall // 60:.0f}:{wall % 60:04.1f} of wall time "
                                f"({sum(_run.values()):.0f} s of tests); the ten slowest:")
    for test, seconds in slowest:
        terminalreporter.write_line(f"{seconds:8.1f} s  {test}")
    MEASURED.parent.mkdir(exist_ok=True)
    MEASURED.write_text(json.dumps({k: round(v, 1) for k, v in sorted(_run.items()) if v >= 1.0},
                                   indent=0, sort_keys=True) + "\n")


def pytest_runtest_setup(item) -> None:
    """A grouped test run outside its group fails: xdist marks a grouped test by a suffix on its
    node id, and a pytest that drops the suffix (9.2, pytest-xdist#1386) spreads a group over
    both workers without a word (two `apt-get`s at once, shared fixtures built twice)."""
    if xdist_worker() and item.config.getoption("loadgroup", False) \
            and item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
        pytest.fail("--dist loadgroup ignored this test's xdist_group: this pytest breaks "
                    "pytest-xdist's groups (see the pin in pyproject.toml)", pytrace=False)


def pytest_collection_finish(session) -> None:
    """In one process: start the docker prebuild (niced dockerd, base image, both images) in the
    background when a docker test is selected and an engine can be had; the test waits for it.
    Under xdist each worker collects everything, so the docker test's own worker builds."""
    from tests import docker_engine

    wanted = any(item.get_closest_marker("docker") for item in session.items)
    if wanted and not xdist_worker() and not session.config.option.collectonly \
            and docker_engine.unavailable() is None:
        docker_engine.prebuild(ROOT)


def pytest_sessionfinish(session, exitstatus) -> None:
    from tests import docker_engine

    docker_engine.stop_prebuild()  # dockerd stopped by its PID, even if the docker test never ran
