"""Chaos soak: a trainer and an evaluator (policy ``all``, ``--keep 2`` so the trainer's garbage
collection races the evaluator) run for a fixed time while the harness SIGKILLs or SIGTERMs one
of them at random moments — some chosen to land during a save (a ``ckpt-N_temp`` directory
exists) or during an evaluation (the evaluator has just logged "evaluating") — and restarts it.
Stops by itself; then checks, from the model dir, the evaluator's history and the logs:

* every checkpoint the state file ever named is evaluated exactly once, or recorded ``skipped``
  with its reason — except one deleted (``--keep``) while the evaluator was down, whose deletion
  no evaluator was there to record (counted apart as *unseen while down*);
* no evaluation failed (a partial checkpoint read would fail);
* the trainer resumed each time at the newest checkpoint the state file named when it died;
* the history passes ``PRAGMA integrity_check``;
* the evaluator answered health within a second whenever it was up and serving.

A kill aimed at a save or an evaluation is counted as landing there only when that is read back
after the signal (``Soak.landed``); one that missed says so ("…, finished before the signal").

``--split`` runs the evaluator as two parts of every evaluation (``--shard 0/2`` and ``1/2``, their
results meeting in a parts dir; the history checked is part 0's merged one), each killed and
restarted like the evaluator; also checked: every evaluation recorded has the same images (none
merged from fewer parts).

``--tracking`` adds a real MLflow tracking server (``mlflow server``, SQLite, on 127.0.0.1) that the
trainer and the evaluator send to (``--tracking-uri``), killed like them and brought back after a
random outage; the first evaluator and tracker kills wait for a record the evaluator has just made
(it is being sent).  Also checked, once the evaluator has sent its backlog: every evaluation in the
history is in MLflow once, at its step, with its bounds (none lost, none twice), in one MLflow run.
A kill aimed at a send is read back as landing before MLflow had the record, between MLflow's
acknowledgement and the evaluator's mark (the moment a resend would duplicate), or after the mark.

``--cluster ps`` runs the trainer as a parameter-server cluster (a ps, two workers and the chief
that coordinates them, separate processes on 127.0.0.1) and kills any of them or the evaluator:

* a killed worker is restarted and the chief trains on without it meanwhile (it must not exit);
* a killed ps fails the chief with one line naming the ps (exit 1) — then the harness restarts
  the ps and the chief, which must resume at the newest named checkpoint like any trainer.

    .venv/bin/python bench/chaos.py [--seconds 600] [--kills 20] [--seed 0] [--cluster single|ps] [--split]
        [--tracking] [--dir DIR]

Prints one JSON line of figures; exit 1 if any invariant is violated.  ``tests/test_chaos.py``
runs a short version.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EVAL_IMAGES = 2  # each evaluation's images (--max-eval-examples): every record must have them all
sys.path.insert(0, str(ROOT))
from showtell.common import processes  # noqa: E402
from tests.measure import free_ports  # noqa: E402

TINY = ["--embedding-size", "32", "--lstm-units", "32", "--batch-size", "4", "--shuffle-buffer", "64",
        "--train-inception", "false"]
PS_FAILED = "showtell train: error: the training cluster failed: parameter server"
RESUMED = re.compile(r"resumed from \S*ckpt-(\d+) at step (\d+)")
RECORDED = re.compile(r"step (\d+): ok ")  # the evaluator's line for a record it made (then sends)
NAMED = re.compile(r'all_model_checkpoint_paths: "(?:.*/)?ckpt-(\d+)"')


@dataclass
class Soak:
    base: Path
    seconds: float
    kills: int
    seed: int
    cluster: str = "single"
    split: bool = False  # the evaluator as two parts (--shard 0/2 and 1/2): ``evaluator`` is part 0
    tracking: bool = False  # a real MLflow server the services send to, killed too (role ``tracker``)
    server: Any = None  # its ``tests.tracking_server.MlflowServer``
    port: int = 0
    hosts: dict[str, str] = field(default_factory=dict)  # ps / worker0 / worker1 / chief → host:port
    named: dict[int, list[float]] = field(default_factory=dict)  # step → [first, last] seen named
    down: list[list[float]] = field(default_factory=list)  # evaluator down intervals [from, to]
    resumes: list[tuple[int, int | None]] = field(default_factory=list)  # (expected, log file index)
    events: list[dict] = field(default_factory=list)
    health_failures: int = 0
    serving: bool = False
    replaced: bool = True  # False from an evaluator's kill until its replacement is started
    done: bool = False
    recoveries: list[float] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # processes that failed when they should not
    ps_failures_named: int = 0
    chief_waited: int = 0  # ps kills while the chief was starting
    aimed_at: Path = Path()  # the save's temporary directory a kill aimed at
    started: list = field(default_factory=list)  # every process started, killed with its group at the end
    # What every record must have evaluated: the set's first EVAL_IMAGES images, each with all its
    # captions (read from the data once it is built; None: not checked)
    set_examples: int | None = None
    sending: int = 0  # the step of the record a kill aimed at "a send" waited for
    tracked_figures: dict = field(default_factory=dict)  # --tracking: what MLflow holds in the end

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def model(self) -> Path:
        return self.base / "model"

    @property
    def work(self) -> Path:
        return self.base / "eval"

    # ---------------------------------------------------------------- processes
    @property
    def roles(self) -> list[str]:
        """Who can be killed; 'trainer' is the process that writes checkpoints (the chief)."""
        roles = ["trainer", "evaluator"] if self.cluster == "single" else \
            ["trainer", "ps", "worker0", "worker1", "evaluator"]
        roles = [*roles, "evaluator1"] if self.split else roles
        return [*roles, "tracker"] if self.tracking else roles

    @property
    def tracked(self) -> list[str]:
        return ["--tracking-uri", self.server.uri] if self.tracking else []

    def start(self, role: str, n: int):
        with _unbroken():  # a harness's SIGTERM waits until the new process is one to stop
            if role == "tracker":
                proc = self.server.start().proc
            else:
                proc = self.start_evaluator(n, int(role == "evaluator1")) if role.startswith("evaluator") \
                    else self.start_training(role, n)
            self.started.append(proc)  # each leads its own process group (processes.start)
        if role == "evaluator":
            self.replaced = True  # from here a SERVING answer is the new process's
        return proc

    def start_training(self, role: str, n: int):
        log = self.base / f"{role}-{n:02d}.log"
        common = ["train", "--data", str(self.data), "--model-dir", str(self.model), *TINY]
        if self.cluster == "ps":
            common += ["--strategy", "parameter_server", "--ps-hosts", self.hosts["ps"],
                       "--worker-hosts", f"{self.hosts['worker0']},{self.hosts['worker1']}",
                       "--chief-host", self.hosts["chief"]]
            if role != "trainer":
                job, index = (role, "0") if role == "ps" else ("worker", role[-1])
                return processes.start([*common, "--job-name", job, "--task-index", index], log)
            common += ["--job-name", "chief", "--task-index", "0"]
        return processes.start([*common, "--steps", "1000000", "--save-every-steps", "5",
                                "--save-every-secs", "0", "--keep", "2", "--log-every-steps", "10",
                                *self.tracked], log)

    def start_evaluator(self, n: int, part: int = 0):
        """The evaluator (with ``split``, its part ``part``: part 1 has a work dir of its own)."""
        split = ["--shard", f"{part}/2", "--parts-dir", str(self.base / "parts")] if self.split else []
        return processes.start(["evaluate", "--model-dir", str(self.model), "--data", str(self.data),
                                "--work-dir", str(self.work_of(part)),
                                "--port", str(self.port if part == 0 else 0),
                                "--policy", "all", "--max-eval-examples", str(EVAL_IMAGES),
                                "--beam-size", "1", "--meteor", "false", "--threads", "1", *split,
                                *(self.tracked if part == 0 else [])],
                               self.base / f"{('evaluator', 'evaluator1')[part]}-{n:02d}.log")

    def work_of(self, part: int) -> Path:
        return self.work if part == 0 else self.base / "eval-1"

    def own_history(self, part: int) -> Path:
        """Where part ``part`` records its own evaluations: the history, or, split, its parts'."""
        return self.work_of(part) / ("parts.sqlite" if self.split else "evaluations.sqlite")

    # ---------------------------------------------------------------- observers
    def watch_state(self) -> None:
        while not self.done:
            try:
                text = (self.model / "checkpoint").read_text()
            except OSError:
                text = ""
            now = time.monotonic()
            for step in map(int, NAMED.findall(text)):
                self.named.setdefault(step, [now, now])[1] = now
            time.sleep(0.05)

    def probe_health(self) -> None:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        stub = health_pb2_grpc.HealthStub(channel)
        while not self.done:
            was_serving = self.serving
            try:
                ok = stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0).status == 1
            except grpc.RpcError:
                ok = False
            if was_serving and self.serving and not ok:
                self.health_failures += 1
            # Only the replacement ends a down interval: a SIGTERMed evaluator still answers SERVING
            # until its signal handler runs, and counting that as the recovery made the replacement's
            # start-up count as health unanswered while serving (seen once in CI: 28 times).
            if ok and not self.serving and self.replaced and self.down and self.down[-1][1] is None:
                self.down[-1][1] = time.monotonic()
                self.recoveries.append(self.down[-1][1] - self.down[-1][0])
                self.serving = True
            time.sleep(0.5)
        channel.close()

    # ---------------------------------------------------------------- faults
    def wait_moment(self, moment: str, evaluator_log: Path) -> str:
        """Wait (up to 60 s) for the chosen moment.  What is returned is what was seen just before
        the kill ("missed: no save within 60 s" when the moment never came — counted as a miss in
        the summary, not as a kill at random); ``landed`` says where the kill really fell."""
        deadline = time.monotonic() + 60
        if moment == "save":
            stale = set(self.model.glob("ckpt-*_temp"))  # left by saves killed before: not this one
            while time.monotonic() < deadline:
                saving = set(self.model.glob("ckpt-*_temp")) - stale
                if saving:
                    self.aimed_at = saving.pop()
                    return "during a save"
                time.sleep(0.005)
        elif moment == "evaluation":
            seen = evaluator_log.read_text().count("evaluating ") if evaluator_log.exists() else 0
            while time.monotonic() < deadline:
                if evaluator_log.exists() and evaluator_log.read_text().count("evaluating ") > seen:
                    time.sleep(0.1)
                    return "during an evaluation"
                time.sleep(0.02)
        elif moment == "send":
            seen = len(RECORDED.findall(evaluator_log.read_text())) if evaluator_log.exists() else 0
            while time.monotonic() < deadline:
                made = RECORDED.findall(evaluator_log.read_text()) if evaluator_log.exists() else []
                if len(made) > seen:
                    self.sending = int(made[-1])
                    return "during a send"
                time.sleep(0.005)
        else:
            return "at a random moment"
        return f"missed: no {moment} within 60 s"

    def landed(self, when: str, evaluator_log: Path) -> str:
        """Where a kill aimed at a moment fell, read right after the signal was sent, the same way
        for SIGKILL and SIGTERM and for any victim: the save seen begun before the signal is still
        unfinished after it (its temporary directory is still there), or the evaluation seen begun
        before it still has no record after it.  So the signal arrived while that moment was under
        way.  A save or record that ends between the signal and this read (a SIGTERMed trainer
        finishes its save) is counted as "finished before the signal": the figure can only say
        less than happened, never more."""
        if when == "during a save" and not self.aimed_at.exists():
            return "during a save, finished before the signal"
        if when == "during a send":
            return self.landed_send("tracker" not in evaluator_log.name)
        if when == "during an evaluation":
            begun = re.findall(r"evaluating \S+ \(step (\d+)\)", evaluator_log.read_text())
            history = self.own_history(int("evaluator1-" in evaluator_log.name))
            db = sqlite3.connect(f"file:{history}?mode=ro", uri=True)
            recorded = db.execute("SELECT 1 FROM evaluations WHERE step=?", (int(begun[-1]),)).fetchone()
            db.close()
            if recorded:
                return "during an evaluation, finished before the signal"
        return when

    def landed_send(self, evaluator_killed: bool) -> str:
        """Where a kill aimed at the send of record ``sending`` fell: already marked as sent (the
        send finished before the signal), or — the evaluator killed — held by MLflow but not
        marked (between the acknowledgement and the mark), or not held (before MLflow had it)."""
        db = sqlite3.connect(f"file:{self.work / 'evaluations.sqlite'}?mode=ro", uri=True)
        row = db.execute("SELECT rowid FROM evaluations WHERE step=? AND eval_set='val' ORDER BY rowid DESC",
                         (self.sending,)).fetchone()
        db.close()
        try:
            marked = json.loads((self.work / "tracking.json").read_text())["sent_through"]
        except (OSError, ValueError, KeyError):
            marked = 0
        if row is not None and marked >= row[0]:
            return "during a send, finished before the signal"
        if not evaluator_killed:
            return "during a send"
        client = self.server.client()
        held = any(m.step == self.sending for run in client.search_runs(
            [client.get_experiment_by_name("showtell").experiment_id])
            for m in client.get_metric_history(run.info.run_id, "val/loss"))
        return "during a send, between MLflow's acknowledgement and the mark" if held \
            else "during a send, before MLflow had it"

    def run(self) -> dict:
        from showtell.captioning.config import SyntheticConfig
        from showtell.captioning.data import synthetic

        rng = random.Random(self.seed)
        synthetic.build(self.data, SyntheticConfig(train_images=40, val_images=4, image_size=75, seed=3,
                                                   train_shards=4))
        val = json.loads((self.data / "dataset.json").read_text())["splits"]["val"]
        self.set_examples = min(EVAL_IMAGES, val["images"]) * val["captions"] // val["images"]
        if not self.port:
            self.port = free_ports(1)[0]
        if self.tracking:
            from tests.tracking_server import MlflowServer

            self.server = MlflowServer(self.base / "mlflow")
        if self.cluster == "ps":
            self.hosts = dict(zip(["ps", "worker0", "worker1", "chief"],
                                  (f"127.0.0.1:{p}" for p in free_ports(4)), strict=True))
        counts = dict.fromkeys(self.roles, 0)
        try:
            # the tracker first (what the others send has somewhere to go), the chief after its servers
            first = ["tracker"] if self.tracking else []
            procs = {role: self.start(role, 0) for role in first}
            procs.update({role: self.start(role, 0) for role in self.roles
                          if role not in ("trainer", *first)})
            procs["trainer"] = self.start("trainer", 0)
            self.down.append([time.monotonic(), None])
            threads = [threading.Thread(target=f, daemon=True) for f in (self.watch_state, self.probe_health)]
            for t in threads:
                t.start()
            started = time.monotonic()
            gap = self.seconds / (self.kills + 1)
            for k in range(self.kills):
                time.sleep(max(0.0, started + gap * (k + 1) * rng.uniform(0.8, 1.0) - time.monotonic()))
                self.restart_the_fallen(procs, counts)
                # The first kills aim at the moments that matter, then they are drawn at random.
                aimed = ("trainer", "evaluator", "evaluator1") if self.split else ("trainer", "evaluator")
                aimed = ("trainer", "evaluator", "tracker", "evaluator") if self.tracking else aimed
                victim = aimed[k] if k < len(aimed) else rng.choice(self.roles)
                sig = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM])
                moment = {"trainer": ["save", "random"], "evaluator": ["evaluation", "random"],
                          "evaluator1": ["evaluation", "random"], "tracker": ["send", "random"]
                          }.get(victim, ["save", "random"])
                at_send = k == 3 or (k >= len(aimed) and rng.random() < 0.5)
                if self.tracking and victim == "evaluator" and at_send:
                    moment = ["send", "send"]  # the moment a resend could duplicate
                log = self.base / (f"evaluator1-{counts['evaluator1']:02d}.log" if victim == "evaluator1"
                                   else f"evaluator-{counts['evaluator']:02d}.log")
                watched = self.base / f"evaluator-{counts['evaluator']:02d}.log"  # the sends' log
                when = self.wait_moment(moment[0] if k < len(aimed) else rng.choice(moment),
                                        watched if victim == "tracker" else log)
                if victim == "evaluator":
                    self.serving, self.replaced = False, False
                    self.down.append([time.monotonic(), None])
                (os.killpg if victim == "tracker" else os.kill)(procs[victim].pid, sig)  # its uvicorn too
                when = self.landed(when, self.base / "tracker" if victim == "tracker" else log)
                code = procs[victim].wait(timeout=120)
                if victim == "tracker":
                    processes.kill_group(procs[victim].pid)
                    time.sleep(rng.uniform(0, gap / 2))  # an outage of its own length
                if sig == signal.SIGTERM and victim != "tracker":
                    self.check_stopped_exit(victim, counts[victim], code)
                counts[victim] += 1
                if victim == "ps" and not self.training(counts["trainer"]):
                    # A chief still starting waits for its ps (and says so), then trains.
                    procs["ps"] = self.start("ps", counts["ps"])
                    if self.starting_chief_waits(procs["trainer"], counts["trainer"]):
                        counts["trainer"] += 1
                        self.note_resume(counts["trainer"])
                        procs["trainer"] = self.start("trainer", counts["trainer"])
                elif victim == "ps":
                    # The chief cannot train without its variables: it must fail, in one line.
                    self.ps_lost(procs["trainer"], counts["trainer"])
                    counts["trainer"] += 1
                    procs["ps"] = self.start("ps", counts["ps"])
                    self.note_resume(counts["trainer"])
                    procs["trainer"] = self.start("trainer", counts["trainer"])
                else:
                    if victim == "trainer":
                        self.note_resume(counts["trainer"])
                    procs[victim] = self.start(victim, counts[victim])
                self.events.append({"victim": victim, "signal": signal.Signals(sig).name, "when": when,
                                    "exit": code, "at": round(time.monotonic() - started, 1)})
            time.sleep(max(0.0, started + self.seconds - time.monotonic()))
            # The end: the trainer stops, the evaluator catches up with what is still named.
            os.kill(procs["trainer"].pid, signal.SIGTERM)
            procs["trainer"].wait(timeout=300)
            self.catch_up(procs["evaluator"], timeout=180)
            if self.tracking:
                self.tracked_figures = self.flushed(procs, counts)
        finally:
            self.done = True
            for proc in self.started:  # the running ones, and what killed ones left in their groups
                processes.stop(proc)
        return self.check()

    def flushed(self, procs: dict, counts: dict) -> dict:
        """The end with ``--tracking``: the tracker up, the evaluator's backlog sent (at most 120 s),
        then every evaluation of the history against MLflow."""
        import grpc

        from showtell.v1 import metrics_pb2 as pb
        from showtell.v1 import metrics_pb2_grpc
        from tests.tracking_server import exactly_once

        if procs["tracker"].poll() is not None:
            procs["tracker"] = self.start("tracker", counts["tracker"])
        began, backlog = time.monotonic(), -1
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            stub = metrics_pb2_grpc.MetricsServiceStub(channel)
            while time.monotonic() - began < 120:
                with contextlib.suppress(grpc.RpcError):  # a replacement still starting
                    backlog = stub.GetStatus(pb.GetStatusRequest(), timeout=10).status.tracking.backlog
                if backlog == 0:
                    break
                time.sleep(0.5)
        from showtell.evaluator.records.store import Store

        store = Store(self.work / "evaluations.sqlite")
        records = [r for r in store.arrived_after(0) if r.status == "ok" and r.eval_set == "val"]
        showtell_runs = {r.run for r in store.arrived_after(0)}
        store.close()
        return {"backlog_left": backlog, "flushed_in_s": round(time.monotonic() - began, 1),
                "records": len(records), "showtell_runs": len(showtell_runs),
                **exactly_once(self.server, records)}

    def restart_the_fallen(self, procs: dict, counts: dict) -> None:
        """Nothing should exit unless killed (a lost worker must not stop the chief): each that did
        is a violation, and is restarted so the soak goes on."""
        for role, proc in procs.items():
            if proc.poll() is not None:
                self.lost.append(f"{role}-{counts[role]:02d} exited {proc.returncode} unkilled")
                counts[role] += 1
                if role == "trainer":
                    self.note_resume(counts[role])
                procs[role] = self.start(role, counts[role])

    def check_stopped_exit(self, role: str, n: int, code: int) -> None:
        """A trainer or ps SIGTERMed is not finished: 143 (or -15, the signal itself, if it came
        before the handler was installed) — never 0, which Kubernetes reads as "done".  The
        evaluator, a service with no end of its own here, exits 0."""
        expected = {0, -signal.SIGTERM} if role.startswith("evaluator") else {143, -signal.SIGTERM}
        if code not in expected:
            self.lost.append(f"{role}-{n:02d} exited {code} after SIGTERM (expected {sorted(expected)})")

    def note_resume(self, n: int) -> None:
        """The trainer about to start as number ``n`` must resume at the newest named checkpoint."""
        state = self.model / "checkpoint"
        named = [int(s) for s in NAMED.findall(state.read_text())] if state.exists() else []
        self.resumes.append((max(named) if named else 0, n))

    def training(self, n: int) -> bool:
        """Trainer ``n`` has restored (or started from scratch): it is past connecting."""
        text = (self.base / f"trainer-{n:02d}.log").read_text()
        return bool(RESUMED.search(text)) or "starting from scratch" in text

    def starting_chief_waits(self, chief, n: int) -> bool:
        """The ps was lost while chief ``n`` was starting: it must get going once the ps is back
        (or, if it had connected to the old ps just before, fail naming it like a running one).
        True when it exited and is to be restarted."""
        self.chief_waited += 1
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and chief.poll() is None and not self.training(n):
            time.sleep(0.5)
        if chief.poll() is None and not self.training(n):
            self.lost.append(f"trainer-{n:02d} did not start training within 180 s of its ps coming back")
        elif chief.poll() is not None:
            if PS_FAILED in (self.base / f"trainer-{n:02d}.log").read_text():
                self.ps_failures_named += 1
                return True
            self.lost.append(f"trainer-{n:02d} exited {chief.returncode} while starting, not naming the ps")
            return True
        return False

    def ps_lost(self, chief, n: int) -> None:
        """After the ps is killed: the chief exits 1 with one line naming the ps (or is stopped)."""
        try:
            code = chief.wait(timeout=180)
        except Exception:
            os.kill(chief.pid, signal.SIGKILL)
            chief.wait()
            self.lost.append(f"trainer-{n:02d} still running 180 s after the ps was killed")
            return
        text = (self.base / f"trainer-{n:02d}.log").read_text()
        if PS_FAILED in text:
            self.ps_failures_named += 1
        elif RESUMED.search(text) or "starting from scratch" in text:
            self.lost.append(f"trainer-{n:02d} exited {code} without naming the lost ps")
        # else: the chief had not got as far as the cluster; nothing to name.
        if code == 0:
            self.lost.append(f"trainer-{n:02d} exited 0 after the ps was killed")

    def catch_up(self, evaluator, timeout: float) -> None:
        """Wait until every checkpoint the final state file names has a row (or time runs out)."""
        final = {int(s) for s in NAMED.findall((self.model / "checkpoint").read_text())}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and evaluator.poll() is None:
            try:
                db = sqlite3.connect(f"file:{self.work / 'evaluations.sqlite'}?mode=ro", uri=True)
                recorded = {row[0] for row in db.execute("SELECT step FROM evaluations")}
                db.close()
            except sqlite3.Error:
                recorded = set()
            if final <= recorded:
                return
            time.sleep(1)

    # ---------------------------------------------------------------- invariants
    def check(self) -> dict:
        violations = []
        db = sqlite3.connect(self.work / "evaluations.sqlite")
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        if integrity != "ok":
            violations.append(f"integrity_check: {integrity}")
        rows = db.execute("SELECT run, step, status, reason, recorded FROM evaluations").fetchall()
        sizes = {n for (n,) in db.execute("SELECT num_examples FROM evaluations WHERE status='ok'")}
        db.close()
        # Each record against the set itself, not against the other records: a record merged from
        # fewer parts is short.
        expected = self.set_examples
        if expected is not None and sizes - {expected}:
            violations.append(f"evaluations of {sorted(sizes - {expected})} examples where the set has "
                              f"{expected}")
        runs = {r[0] for r in rows}
        by_step: dict[int, list[tuple[str, str]]] = {}
        for _, step, status, reason, recorded in rows:
            by_step.setdefault(step, []).append((status, reason))
            if recorded > 1:  # the store counts a second record of a checkpoint instead of dropping it
                violations.append(f"step {step} evaluated {recorded} times")
        unseen, skipped = [], {}
        for step, (_first, last) in sorted(self.named.items()):
            recorded = by_step.get(step, [])
            if len(recorded) > 1:
                violations.append(f"step {step} recorded {len(recorded)} times")
            elif not recorded:
                # It went while the evaluator was down (the harness sees the state file every
                # 50 ms): no evaluator can record a deletion it was not there to see.
                if any(a - 0.1 <= last and (b is None or last <= b) for a, b in self.down):
                    unseen.append(step)
                else:
                    violations.append(f"step {step} was named but never recorded")
            elif recorded[0][0] == "skipped":
                reason = recorded[0][1]
                kind = skip_kind(reason)
                skipped[kind] = skipped.get(kind, 0) + 1
        failed = [(s, r) for s, rs in by_step.items() for st, r in rs if st == "failed"]
        violations += [f"step {s} failed: {r}" for s, r in failed]
        resumed, killed_starting = 0, 0
        for expected, n in self.resumes:
            text = (self.base / f"trainer-{n:02d}.log").read_text()
            match = RESUMED.search(text)
            if expected == 0 and "starting from scratch" in text:
                resumed += 1
            elif match is None:
                killed_starting += 1  # killed again before it got as far as restoring
            elif int(match.group(2)) != expected:
                violations.append(f"trainer-{n:02d} resumed at {match.group(2)}, newest named was {expected}")
            else:
                resumed += 1
        violations += self.lost
        tracked = self.tracked_figures
        counted = ("backlog_left", "points_missing", "points_twice", "runs_twice")
        if self.tracking and any(tracked.get(k) != 0 for k in counted):
            violations.append(f"MLflow: {tracked}")
        if self.health_failures:
            violations.append(f"health unanswered {self.health_failures} times while serving")
        return {
            "cluster": self.cluster, "split": self.split, "seconds": self.seconds, "kills": len(self.events),
            "kills_by": _tally(f"{e['victim']} {e['signal']} {e['when']}" for e in self.events),
            "aimed_kills_missed": sum(1 for e in self.events if e["when"].startswith("missed")),
            "restarts": len(self.events), "checkpoints_named": len(self.named), "runs": len(runs),
            "evaluated": sum(1 for rs in by_step.values() for st, _ in rs if st == "ok"),
            "skipped": skipped, "unseen_while_down": len(unseen), "trainer_resumes_checked": resumed,
            "trainer_killed_before_restoring": killed_starting,
            **({"ps_losses_named_by_the_chief": self.ps_failures_named,
                "ps_lost_while_the_chief_started": self.chief_waited} if self.cluster == "ps" else {}),
            "worst_evaluator_recovery_s": round(max(self.recoveries, default=0.0), 1),
            **({"tracking": tracked} if self.tracking else {}),
            "violations": violations,
        }


# A skipped record's reason, by what it says (its steps and paths left out): the soak's tally keys
PART_WENT_ON = re.compile(r"^part ([\d/, ]+) went on to later checkpoints without it")


def skip_kind(reason: str) -> str:
    """Why a checkpoint was recorded skipped, in words a tally can count (a reason none of these
    match is kept whole: a new kind is read, not cut)."""
    if "cut short" in reason:
        return "evaluation cut short, then deleted"
    if "deleted by the trainer" in reason:
        return "deleted by the trainer"
    if match := PART_WENT_ON.match(reason):
        return f"deleted before part {match.group(1)} evaluated it (it went on to later checkpoints)"
    return reason


def _tally(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


_DEFERRED: dict[str, int | None] = {"depth": 0, "code": None}


def _terminated(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the clean-up is not cut short
    if _DEFERRED["depth"]:  # mid-start: the process being started is not in the list to stop yet
        _DEFERRED["code"] = 128 + signum
        return
    sys.exit(128 + signum)


@contextlib.contextmanager
def _unbroken() -> Iterator[None]:
    """A stretch a SIGTERM must not cut (starting a process and noting it): the exit it asks for
    comes at the end.  Without it, a signal inside ``Popen`` left a child no clean-up knew of —
    seen once in a fresh clone's suite on a loaded machine (the soak's trainer and evaluator
    running after it exited 143)."""
    _DEFERRED["depth"] += 1
    try:
        yield
    finally:
        _DEFERRED["depth"] -= 1
        if not _DEFERRED["depth"] and _DEFERRED["code"] is not None:
            sys.exit(_DEFERRED["code"])


def main(argv: list[str] | None = None) -> int:
    from rounds import add_out, publish  # here: the tests import this module as bench.chaos, for Soak

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cluster", choices=["single", "ps"], default="single",
                   help="the trainer as one process, or as a parameter-server cluster (ps, 2 workers, chief)")
    p.add_argument("--split", action="store_true",
                   help="the evaluator as two parts of every evaluation (--shard 0/2, 1/2), each killed "
                        "at random")
    p.add_argument("--tracking", action="store_true",
                   help="a real MLflow server the trainer and the evaluator send to, killed at random too")
    p.add_argument("--dir", type=Path, help="where the run's files go (default: a temporary directory)")
    add_out(p, "chaos")
    args = p.parse_args(argv)
    # A harness's SIGTERM (a timeout) ends the soak through its clean-up: nothing is left running.
    signal.signal(signal.SIGTERM, _terminated)
    base = args.dir or Path(tempfile.mkdtemp(prefix="showtell-chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    result = Soak(base=base, seconds=args.seconds, kills=args.kills, seed=args.seed,
                  cluster=args.cluster, split=args.split, tracking=args.tracking).run()
    publish({**result, "dir": str(base)}, args.out, argv, indent=None)
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
