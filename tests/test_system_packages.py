"""Two test processes installing Debian packages at once both succeed (``tests/system_packages.py``).

On a fresh machine the Docker tools are missing and two pytest workers asked ``apt-get`` for
them at once: the second hit dpkg's lock and exited 100.  Here two real processes install a
small harmless package (GNU ``hello``) at the same moment, each running ``apt-get`` itself.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests import system_packages
from tests.helpers import ROOT, wait_for
from tests.system_packages import install

PACKAGE = "hello"



@pytest.fixture
def root_with_apt() -> None:
    """Skipped without root and apt-get; failed under CI, which has both."""
    system_packages.require(system_packages.root_with_apt())


def _installed() -> bool:
    return subprocess.run(["dpkg-query", "-W", "-f=${Status}", PACKAGE], capture_output=True,
                          text=True).stdout.startswith("install ok installed")


def _remove() -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    from tests.system_packages import _locked  # the same lock: a remove is a dpkg run as well

    with _locked():
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "remove", "-y", "-q", PACKAGE],
                       env=env, capture_output=True, check=True, timeout=600)


@pytest.mark.e2e  # two real apt-get runs (≈ 14 s): make test's, not the inner loop's
def test_two_processes_installing_at_once_both_succeed(tmp_path, root_with_apt):
    if _installed():
        _remove()
    go = tmp_path / "go"
    code = ("import sys, time, pathlib\n"
            "from tests.system_packages import install\n"
            "pathlib.Path(sys.argv[2]).touch()\n"  # ready
            "go = pathlib.Path(sys.argv[1])\n"
            "while not go.exists(): time.sleep(0.005)\n"  # both start apt-get at the same moment
            f"install([{PACKAGE!r}])\n")
    ready = [tmp_path / f"ready-{i}" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", code, str(go), str(flag)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for flag in ready]
    try:
        wait_for(lambda: all(flag.exists() for flag in ready), 60, "both installers to start")
        go.touch()
        results = [(proc.wait(timeout=900), proc.stderr.read()) for proc in procs]
        for rc, stderr in results:
            assert rc == 0, stderr[-2000:]
        assert _installed()
        install([PACKAGE])  # and a third, already installed: nothing to do, still fine
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if _installed():
            _remove()


@pytest.mark.parametrize("env, outcome", [({"CI": "true"}, "failed"),
                                          ({"SHOWTELL_REQUIRE_DOCKER": "1"}, "failed"),
                                          ({"CI": "", "SHOWTELL_REQUIRE_DOCKER": ""}, "skipped")])
def test_a_missing_tool_fails_under_ci_and_skips_elsewhere(monkeypatch, env, outcome):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(BaseException) as caught:
        system_packages.require("dockerd missing, and installing needs root")
    assert type(caught.value).__name__ == {"failed": "Failed", "skipped": "Skipped"}[outcome]
    assert "dockerd missing" in str(caught.value)
    system_packages.require(None)  # nothing missing: nothing happens
