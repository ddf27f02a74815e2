"""A short chaos soak (``bench/chaos.py``): a trainer and an evaluator killed (SIGKILL or SIGTERM,
during a save, during an evaluation, or at random) and restarted — no invariant violated.  And
the soak's own checks, shown to fire on the defects they guard against."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.chaos import Soak
from showtell.common import processes
from showtell.evaluator.records.record import Record
from showtell.evaluator.records.store import Store
from tests.helpers import ROOT


@pytest.mark.e2e
def test_short_chaos_soak_violates_nothing(tmp_path: Path):
    result = processes.run_process([sys.executable, str(ROOT / "bench" / "chaos.py"), "--seconds", "70",
                                    "--kills", "4", "--seed", "3", "--dir", str(tmp_path / "soak")],
                                   timeout=900, cwd=ROOT)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["violations"] == [], figures
    assert result.returncode == 0, result.stderr[-3000:]
    assert figures["evaluated"] >= 3
    # The moments that matter happened, as read back after each kill whatever its signal (not
    # merely aimed at: a miss is labelled "…, finished before the signal"): the first two kills
    # wait for a save and for an evaluation.
    landed = {what.split(" ", 2)[2] for what in figures["kills_by"]}
    assert {"during a save", "during an evaluation"} <= landed, figures["kills_by"]
    assert figures["aimed_kills_missed"] == 0, figures["kills_by"]  # a timed-out aim is a miss
    trainer_kills = sum(n for what, n in figures["kills_by"].items() if what.startswith("trainer"))
    assert figures["trainer_resumes_checked"] + figures["trainer_killed_before_restoring"] == trainer_kills


@pytest.mark.e2e
def test_a_soak_stopped_by_sigterm_cleans_up_and_leaves_nothing_running(tmp_path: Path):
    """A harness's timeout SIGTERMs the soak (``timeout``, a CI job's limit): the soak's own handler
    stops everything it started, in their own sessions, and exits 143.  Its trainer and evaluator,
    seen running (``/proc``) before the signal, are gone after — stopped by the soak, not by us."""
    soak = tmp_path / "soak"

    def running() -> list[str]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(soak) in line and "bench/chaos.py" not in line:
                found.append(f"{entry.name}: {line}")
        return found

    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "chaos.py"), "--seconds", "600",
                             "--kills", "0", "--dir", str(soak)], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        seen: set[str] = set()
        deadline = time.monotonic() + 120
        while not {"train", "evaluate"} <= seen and time.monotonic() < deadline and proc.poll() is None:
            seen.update(m.group(1) for line in running() if (m := re.search(r" -m showtell (\w+)", line)))
            time.sleep(0.2)
        assert {"train", "evaluate"} <= seen, seen  # they were running when the signal came
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=180) == 143
        assert running() == []
    finally:
        processes.kill_tree(proc.pid)
        proc.wait()
        # A soak that died without its clean-up (the defect this test guards against) leaves its
        # children to init: they are no longer its descendants.  Stop them by PID, found by the
        # test's own directory in their command lines.
        for line in running():
            processes.kill_tree(int(line.split(":", 1)[0]))


def test_a_kill_counts_as_landed_only_where_it_is_read_back(tmp_path: Path):
    """``Soak.landed``: an aimed save still unfinished after the signal, or a begun evaluation still
    without its record, is a landing; one that had ended is reported as missed — whatever the signal."""
    soak = Soak(base=tmp_path, seconds=0, kills=0, seed=0)
    soak.aimed_at = soak.model / "ckpt-7_temp"
    soak.aimed_at.mkdir(parents=True)
    assert soak.landed("during a save", tmp_path / "none.log") == "during a save"
    soak.aimed_at.rmdir()
    assert soak.landed("during a save", tmp_path / "none.log") == "during a save, finished before the signal"

    log = tmp_path / "evaluator-00.log"
    log.write_text("I evaluating m/ckpt-5 (step 5)\n")
    store = Store(soak.work / "evaluations.sqlite")
    assert soak.landed("during an evaluation", log) == "during an evaluation"
    store.add(Record(5, "m/ckpt-5", 0.0, 0.0, 1.0, 2, metrics={"loss": 1.0}))
    store.close()
    assert soak.landed("during an evaluation", log) == "during an evaluation, finished before the signal"
    assert soak.landed("at a random moment", log) == "at a random moment"


def _soak_with_history(tmp_path: Path, *records: Record) -> Soak:
    soak = Soak(base=tmp_path, seconds=0, kills=0, seed=0)
    store = Store(soak.work / "evaluations.sqlite")
    for record in records:
        store.add(record)
    store.close()
    soak.named = {r.step: [0.0, 0.0] for r in records}
    return soak


def test_the_soak_sees_a_checkpoint_evaluated_twice(tmp_path: Path):
    """A planted duplicate: the same checkpoint recorded twice (the store counts it) is a violation."""
    ok = Record(5, "m/ckpt-5", 0.0, 0.0, 1.0, 2, metrics={"loss": 1.0})
    assert _soak_with_history(tmp_path / "once", ok).check()["violations"] == []
    twice = _soak_with_history(tmp_path / "twice", ok, ok).check()
    assert twice["violations"] == ["step 5 evaluated 2 times"]
    short = _soak_with_history(tmp_path / "short", ok)
    short.set_examples = 6  # the set: 2 images of 3 captions; the record has 2 examples
    assert short.check()["violations"] == ["evaluations of [2] examples where the set has 6"]


def test_the_soak_sees_a_named_checkpoint_never_recorded_and_a_failure(tmp_path: Path):
    failed = Record(5, "m/ckpt-5", 0.0, 0.0, 1.0, 2, status="failed", reason="bad read")
    soak = _soak_with_history(tmp_path, failed)
    soak.named[9] = [1.0, 2.0]  # named while the evaluator was up (no down intervals)
    assert soak.check()["violations"] == ["step 9 was named but never recorded", "step 5 failed: bad read"]


def _wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_only_the_replacement_ends_a_down_interval_and_then_silence_counts(tmp_path: Path):
    """``Soak.probe_health`` against a real health server on loopback: a SERVING answer while the
    killed evaluator has no replacement yet (a SIGTERMed one answers until its handler runs) does not
    end the down interval; once the replacement is started it does, and from then on an unanswered
    probe counts.  Without the first rule CI saw a replacement's start-up counted 28 times."""
    import threading
    from concurrent import futures

    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    soak = Soak(base=tmp_path, seconds=0, kills=0, seed=0, port=port)
    soak.serving, soak.replaced = False, False  # as right after a kill
    soak.down.append([time.monotonic(), None])
    probe = threading.Thread(target=soak.probe_health, daemon=True)
    probe.start()
    try:
        assert not _wait_for(lambda: soak.serving, 1.5), "the old process' SERVING ended the interval"
        assert soak.down[-1][1] is None and soak.recoveries == []
        soak.replaced = True  # what Soak.start does for an evaluator
        assert _wait_for(lambda: soak.serving), "the replacement's SERVING did not end the interval"
        assert len(soak.recoveries) == 1 and soak.health_failures == 0
        server.stop(0)
        assert _wait_for(lambda: soak.health_failures >= 1), "silence while serving was not counted"
    finally:
        soak.done = True
        probe.join(5)
        server.stop(0)


def test_a_sigterm_while_a_process_starts_waits_until_it_is_noted():
    """The soak's SIGTERM handler defers the exit while a process is being started and noted (a
    signal inside ``Popen`` once left a child no clean-up knew of): the stretch runs to its end,
    then the exit comes with 128 + the signal.  Outside such a stretch it exits at once."""
    from bench import chaos

    before = signal.getsignal(signal.SIGTERM)
    noted = []
    try:
        with pytest.raises(SystemExit) as stopped, chaos._unbroken():
            chaos._terminated(signal.SIGTERM, None)
            noted.append("the new process")  # reached: the exit waited
        assert noted == ["the new process"] and stopped.value.code == 143
        with pytest.raises(SystemExit):
            chaos._terminated(signal.SIGTERM, None)
    finally:
        chaos._DEFERRED.update(depth=0, code=None)
        signal.signal(signal.SIGTERM, before)
