"""The suite's session hooks (registered with ``-p tests.session_hooks`` in pyproject.toml): the
order tests run in, a guard on xdist's groups, and the Docker prebuild started early and stopped
at the end."""

from __future__ import annotations

import pytest

from tests.helpers import ROOT, xdist_worker


def pytest_collection_modifyitems(config, items) -> None:
    """Docker tests last in one process (their images build in the background meanwhile, see
    below); under xdist the Docker module first, so its worker builds while the other worker
    runs the rest.  (Measured: putting every process-starting test first as well made the run
    slower — the heaviest tests then compete for the two cores; again at debad71 with three
    workers: 15:22 against 14:55, the tests' own CPU seconds 1515 against 1448.)  Stable order
    otherwise."""
    if xdist_worker():
        items.sort(key=lambda item: "test_compose.py" not in item.nodeid)
    else:
        items.sort(key=lambda item: item.get_closest_marker("docker") is not None)


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
