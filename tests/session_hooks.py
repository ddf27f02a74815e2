"""The suite's session hooks (registered with ``-p tests.session_hooks`` in pyproject.toml): the
order tests run in, a guard on xdist's groups, the Docker prebuild started early and stopped at
the end, and the run's figure: its wall time, its CPU, when each worker ran out of work, and its
ten slowest tests with the CPU each cost."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.helpers import ROOT, xdist_worker

# each test's seconds and CPU seconds in this run, written at the end
MEASURED = ROOT / "runs" / "test-durations.json"


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
_cpu: dict[str, float] = {}  # each test's CPU seconds: its worker's own + the processes it waited for
_last_end: dict[str, float] = {}  # each worker's last test's end (epoch seconds)
_started = time.monotonic()
_started_epoch = time.time()
CPU_KEY = "cpu_s"
# What a test adds with ``record_property`` for processes it started but never waited for (the
# Docker engine and its containers): their CPU is the test's too.
UNWAITED_CPU_KEY = "unwaited_cpu_s"


def pytest_sessionstart(session) -> None:
    global _started, _started_epoch
    _started, _started_epoch = time.monotonic(), time.time()


def _cpu_now() -> float:
    """This process's CPU seconds and its reaped children's (every process a test started and
    waited for, their descendants included) — what a test costs the machine beyond its wall time."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


_CPU_AT_SETUP = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    item.stash[_CPU_AT_SETUP] = _cpu_now()
    _check_group(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The test's CPU, from its setup to the end of its teardown, rides on the teardown's report
    (xdist sends ``user_properties`` to the controller)."""
    outcome = yield
    if call.when == "teardown" and _CPU_AT_SETUP in item.stash:
        outcome.get_result().user_properties.append((CPU_KEY, _cpu_now() - item.stash[_CPU_AT_SETUP]))


def pytest_runtest_logreport(report) -> None:
    """Each test's seconds and CPU, as the controller (or the single process) hears of them."""
    if xdist_worker():
        return
    test = _test_id(report.nodeid)
    _run[test] = _run.get(test, 0.0) + report.duration
    if report.when == "teardown":  # the test's own properties ride on each of its reports: one counts
        _cpu[test] = _cpu.get(test, 0.0) + sum(v for k, v in report.user_properties
                                               if k in (CPU_KEY, UNWAITED_CPU_KEY))
    worker = getattr(getattr(report, "node", None), "gateway", None)
    worker_id = worker.id if worker is not None else "main"
    _last_end[worker_id] = max(_last_end.get(worker_id, 0.0), report.stop)


def pytest_terminal_summary(terminalreporter) -> None:
    """The run's figure: its wall time and its ten slowest tests (``runs/test-durations.json``: all)."""
    if xdist_worker() or not _run:
        return
    wall = time.monotonic() - _started
    slowest = sorted(_run.items(), key=lambda kv: -kv[1])[:10]
    cores = os.cpu_count() or 1
    terminalreporter.section("the suite's time")
    terminalreporter.write_line(f"{len(_run)} tests in {_clock(wall)} of wall time "
                                f"({sum(_run.values()):.0f} s of tests)")
    # A CPU-bound run cannot end before its CPU ÷ cores: the figure says how close this one came.
    # Processes no test waited for count only where a test measured them (the Docker engine's).
    cpu = sum(_cpu.values())
    terminalreporter.write_line(f"their CPU: {cpu:.0f} CPU-s (the tests' own and the processes they waited "
                                f"for) = {cpu / (wall * cores):.0%} of {cores} cores × the wall time")
    if len(_last_end) > 1:  # a worker that ran out of work early is time the run left on the table
        ends = ", ".join(f"{w} {_clock(end - _started_epoch)}" for w, end in sorted(_last_end.items()))
        terminalreporter.write_line(f"each worker's last test ended at: {ends}")
    terminalreporter.write_line("the ten slowest:")
    for test, seconds in slowest:
        terminalreporter.write_line(f"{seconds:8.1f} s {_cpu.get(test, 0.0):7.1f} CPU-s  {test}")
    MEASURED.parent.mkdir(exist_ok=True)
    MEASURED.write_text(json.dumps({k: {"s": round(v, 1), "cpu_s": round(_cpu.get(k, 0.0), 1)}
                                    for k, v in sorted(_run.items()) if v >= 1.0},
                                   indent=0, sort_keys=True) + "\n")


def _clock(seconds: float) -> str:
    return f"{seconds // 60:.0f}:{seconds % 60:04.1f}"


def _check_group(item) -> None:
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
